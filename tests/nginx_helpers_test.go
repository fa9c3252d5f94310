package tests

// A real nginx in front of daemons, for tests of what a reverse proxy
// changes: a path prefix, TCP only (no UDP, so no WebTransport), its own
// TLS certificate, and an access log that records every request line.
// nginx runs in the foreground as the test's child, with its own prefix,
// configuration, pid file and logs in t.TempDir(), on a loopback port;
// the system's nginx (port 80, /etc/nginx) is never touched.

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"text/template"
	"time"
)

// nginxPath returns nginx, or skips (fails under CI=true, as the browser
// tests do without chromium).
func nginxPath(t *testing.T) string {
	t.Helper()
	p := os.Getenv("NGINX")
	if p == "" {
		p = "/usr/sbin/nginx"
	}
	if _, err := exec.LookPath(p); err != nil {
		msg := fmt.Sprintf("no nginx at %s (apt-get install nginx-light or nginx; set NGINX to another path): %v", p, err)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return p
}

// nginxRoute is one location of the proxy: requests under Prefix go to
// Upstream: an https:// URL ending in "/", which nginx puts in place of
// the prefix (the prefix is stripped), or one without a path, to which
// nginx passes the request's path as it came (the prefix is kept: the
// daemon's listener.base_path).
type nginxRoute struct {
	Prefix   string // "/vm1/"
	Upstream string // "https://127.0.0.1:PORT/"
}

// nginxProxy is a running nginx.
type nginxProxy struct {
	Addr      string // 127.0.0.1:PORT, TLS (a self-signed certificate)
	CertHash  string // its certificate's SHA-256, hex: the CLI's --cert-hash through the proxy
	Config    string // the configuration it runs, as written
	AccessLog string // path of the access log (nginx's default "combined" format)
	ErrorLog  string

	bin, dir, confFile string
	cmd                *exec.Cmd // nil while stopped
	done               chan struct{}
}

// Origin is the proxy's origin, as a browser sends it.
func (n *nginxProxy) Origin() string { return "https://" + n.Addr }

// AccessLogText returns the access log as written so far (nginx writes a
// line when a request ends, a WebSocket when it closes).
func (n *nginxProxy) AccessLogText(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(n.AccessLog)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// nginxConfig is the reverse proxy of docs/operations.md ("Behind nginx"),
// with paths and ports filled in. Keep the two the same.
var nginxConfig = template.Must(template.New("nginx").Parse(`daemon off;
worker_processes 1;
pid {{.Dir}}/nginx.pid;
error_log {{.Dir}}/error.log info;
events { worker_connections 256; }
http {
    access_log {{.Dir}}/access.log;
    client_body_temp_path {{.Dir}}/client_body;
    proxy_temp_path {{.Dir}}/proxy;
    fastcgi_temp_path {{.Dir}}/fastcgi;
    uwsgi_temp_path {{.Dir}}/uwsgi;
    scgi_temp_path {{.Dir}}/scgi;

    # WebSocket: pass the upgrade on, and Connection: close otherwise.
    map $http_upgrade $connection_upgrade {
        default upgrade;
        ''      close;
    }

    server {
        listen {{.Addr}} ssl http2;
        ssl_certificate     {{.Dir}}/proxy.crt;
        ssl_certificate_key {{.Dir}}/proxy.key;
{{range .Routes}}
        location {{.Prefix}} {
            proxy_pass {{.Upstream}};
            proxy_http_version 1.1;
            proxy_set_header Upgrade $http_upgrade;
            proxy_set_header Connection $connection_upgrade;
            proxy_ssl_verify off;     # the daemon's development certificate
            proxy_read_timeout {{$.ReadTimeout}};    # terminals sit idle for long
            proxy_send_timeout {{$.ReadTimeout}};
            proxy_buffering off;
        }
{{end}}
    }
}
`))

// freeLoopbackPort returns a TCP port on 127.0.0.1 free a moment ago (for
// a listener whose address must be known before it starts: the daemons
// behind the proxy allow its origin).
func freeLoopbackPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	return port
}

// startNginx runs nginx on 127.0.0.1:port (TLS, a self-signed certificate
// made here) with routes, until the test ends; it returns once nginx
// answers.
func startNginx(t *testing.T, port int, routes ...nginxRoute) *nginxProxy {
	t.Helper()
	return startNginxOpts(t, port, nginxOptions{}, routes...)
}

// nginxOptions change the configuration of startNginxOpts.
type nginxOptions struct {
	// ReadTimeout is every route's proxy_read_timeout and
	// proxy_send_timeout (nginx's syntax: "5s"); "" is docs/operations.md's 1h.
	ReadTimeout string
}

// startNginxOpts is startNginx with opts.
func startNginxOpts(t *testing.T, port int, opts nginxOptions, routes ...nginxRoute) *nginxProxy {
	t.Helper()
	bin := nginxPath(t)
	dir := t.TempDir()
	hash := writeSelfSigned(t, filepath.Join(dir, "proxy.crt"), filepath.Join(dir, "proxy.key"))
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	if opts.ReadTimeout == "" {
		opts.ReadTimeout = "1h"
	}
	var conf strings.Builder
	if err := nginxConfig.Execute(&conf, map[string]any{"Dir": dir, "Addr": addr, "Routes": routes, "ReadTimeout": opts.ReadTimeout}); err != nil {
		t.Fatal(err)
	}
	confFile := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(confFile, []byte(conf.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	n := &nginxProxy{Addr: addr, CertHash: hash, Config: conf.String(), AccessLog: filepath.Join(dir, "access.log"), ErrorLog: filepath.Join(dir, "error.log"),
		bin: bin, dir: dir, confFile: confFile}
	n.run(t)
	t.Cleanup(func() {
		n.stop()
		if t.Failed() {
			b, _ := os.ReadFile(n.ErrorLog)
			t.Logf("nginx error log:\n%s", tail(string(b), 3000))
		}
	})
	return n
}

// run starts nginx and returns once it accepts connections.
func (n *nginxProxy) run(t *testing.T) {
	t.Helper()
	// -e: the error log from the start (before the configuration is read,
	// nginx would try /var/log/nginx/error.log).
	cmd := exec.Command(n.bin, "-p", n.dir, "-c", n.confFile, "-e", n.ErrorLog)
	out := newStreamBuf()
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start nginx: %v", err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	n.cmd, n.done = cmd, done
	// Ready once it accepts connections (bounded; exits early if nginx did).
	deadline := time.Now().Add(waitTimeout)
	for {
		c, err := net.DialTimeout("tcp", n.Addr, time.Second)
		if err == nil {
			_ = c.Close()
			return
		}
		select {
		case <-done:
			b, _ := os.ReadFile(n.ErrorLog)
			t.Fatalf("nginx exited at start: %s\n%s", out.String(), tail(string(b), 2000))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("nginx not listening on %s within %v: %v", n.Addr, waitTimeout, err)
		}
		time.Sleep(10 * time.Millisecond) // a bounded poll for the port, not a synchronisation
	}
}

// stop ends nginx with its fast shutdown (SIGINT: every connection
// closed at once), killing it after 10 s.
func (n *nginxProxy) stop() {
	if n.cmd == nil {
		return
	}
	_ = n.cmd.Process.Signal(os.Interrupt)
	select {
	case <-n.done:
	case <-time.After(10 * time.Second):
		_ = n.cmd.Process.Kill()
		<-n.done
	}
	n.cmd = nil
}

// restart stops nginx (its connections cut) and starts it again on the
// same address with the same configuration, as a deployment that restarts
// its proxy does.
func (n *nginxProxy) restart(t *testing.T) {
	t.Helper()
	n.stop()
	n.run(t)
}

// writeSelfSigned writes a self-signed ECDSA certificate for 127.0.0.1
// and localhost, and its key, as PEM.
// It returns the SHA-256 of the certificate's DER, hex (what --cert-hash
// pins).
func writeSelfSigned(t *testing.T, certFile, keyFile string) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "sidecar test proxy"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:])
}

// blackHoleUDP binds UDP 127.0.0.1:port and drops whatever arrives there
// until the test ends: a path where UDP is filtered (a firewall, most
// proxies' networks) rather than refused, so a WebTransport attempt waits
// for an answer that never comes instead of failing at once on an ICMP
// port unreachable.
func blackHoleUDP(t *testing.T, port int) {
	t.Helper()
	pc, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 2048)
		for {
			if _, _, err := pc.ReadFrom(buf); err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		_ = pc.Close()
		<-done
	})
}
