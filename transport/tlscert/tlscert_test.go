package tlscert

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/tls"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func TestLoadOrCreateDev(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state", "sidecar")
	c1, err := LoadOrCreateDev(dir, []string{"sidecar.internal", "10.1.2.3"}, t0)
	if err != nil {
		t.Fatal(err)
	}
	leaf := c1.Leaf
	if leaf == nil {
		t.Fatal("Leaf not set")
	}
	if pk, ok := leaf.PublicKey.(*ecdsa.PublicKey); !ok || pk.Curve != elliptic.P256() {
		t.Errorf("key is %T, want ECDSA P-256", leaf.PublicKey)
	}
	if !leaf.NotBefore.Equal(t0.Add(-time.Hour)) || leaf.NotAfter.Sub(leaf.NotBefore) != 14*24*time.Hour {
		t.Errorf("validity %v .. %v", leaf.NotBefore, leaf.NotAfter)
	}
	for _, h := range []string{"localhost", "127.0.0.1", "::1", "sidecar.internal", "10.1.2.3"} {
		if err := leaf.VerifyHostname(h); err != nil {
			t.Errorf("SAN %s: %v", h, err)
		}
	}
	for name, want := range map[string]os.FileMode{dir: 0o700 | os.ModeDir, filepath.Join(dir, KeyFileName): 0o600} {
		fi, err := os.Stat(name)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode()&^0o022 != want&^0o022 { // umask may only remove bits
			t.Errorf("%s mode %v, want %v", name, fi.Mode(), want)
		}
		if fi.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s is accessible to others: %v", name, fi.Mode())
		}
	}
	pin := Pin(c1)
	if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(pin) {
		t.Errorf("Pin = %q", pin)
	}

	// Reused: same pin a day later, also when asking for a subset of the names.
	c2, err := LoadOrCreateDev(dir, []string{"10.1.2.3"}, t0.Add(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if Pin(c2) != pin {
		t.Error("certificate not reused")
	}

	// Renewed when less than 24h remain.
	c3, err := LoadOrCreateDev(dir, nil, t0.Add(13*24*time.Hour+12*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if Pin(c3) == pin {
		t.Error("not renewed 13.5 days later")
	}
	pin3 := Pin(c3)

	// Renewed when a name is missing.
	now := t0.Add(13*24*time.Hour + 12*time.Hour)
	c4, err := LoadOrCreateDev(dir, []string{"new.example"}, now)
	if err != nil {
		t.Fatal(err)
	}
	if Pin(c4) == pin3 || c4.Leaf.VerifyHostname("new.example") != nil {
		t.Error("not renewed for a new SAN")
	}

	// Renewed when the files are corrupt; the new files load with Load.
	for _, corrupt := range []string{CertFileName, KeyFileName} {
		before := Pin(c4)
		if err := os.WriteFile(filepath.Join(dir, corrupt), []byte("garbage"), 0o600); err != nil {
			t.Fatal(err)
		}
		c4, err = LoadOrCreateDev(dir, nil, now)
		if err != nil {
			t.Fatalf("corrupt %s: %v", corrupt, err)
		}
		if Pin(c4) == before {
			t.Errorf("corrupt %s: not regenerated", corrupt)
		}
		loaded, err := Load(filepath.Join(dir, CertFileName), filepath.Join(dir, KeyFileName))
		if err != nil || Pin(loaded) != Pin(c4) || loaded.Leaf == nil {
			t.Errorf("Load after regeneration: %v", err)
		}
	}

	// No temporary files left behind.
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Errorf("dir holds %d entries", len(entries))
	}
}

func TestLoadErrors(t *testing.T) {
	_, err := Load("/nonexistent/cert.pem", "/nonexistent/key.pem")
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/cert.pem") {
		t.Errorf("err = %v", err)
	}
	if Pin(tls.Certificate{}) != "" {
		t.Error("Pin of an empty certificate")
	}
}

func TestParsePin(t *testing.T) {
	const hexPin = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	want := make([]byte, 32)
	for i := range want {
		want[i] = []byte{0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef}[i%8]
	}
	colons := func(s string) string {
		var parts []string
		for i := 0; i < len(s); i += 2 {
			parts = append(parts, s[i:i+2])
		}
		return strings.Join(parts, ":")
	}
	for _, in := range []string{
		hexPin,
		strings.ToUpper(hexPin),
		colons(hexPin),
		colons(strings.ToUpper(hexPin)),
		"sha256:" + hexPin,
		"SHA256:" + colons(hexPin),
		" " + hexPin + "\n",
	} {
		got, err := ParsePin(in)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("ParsePin(%q) = %x, %v", in, got, err)
		}
	}
	for _, in := range []string{"", "sha256:", hexPin[:62], hexPin + "00", "zz" + hexPin[2:], "md5:" + hexPin} {
		if _, err := ParsePin(in); err == nil || !strings.Contains(err.Error(), "invalid certificate pin") {
			t.Errorf("ParsePin(%q) err = %v", in, err)
		}
	}
}

// TestVerifyPinHandshake runs real TLS handshakes on 127.0.0.1 with a pinned client.
func TestVerifyPinHandshake(t *testing.T) {
	cert, err := LoadOrCreateDev(t.TempDir(), nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	other, err := LoadOrCreateDev(t.TempDir(), nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.(*tls.Conn).Handshake() // fails on the server side when the client rejects
			c.Close()
		}
	}()
	defer func() { ln.Close(); <-done }()

	dial := func(pinHex string) error {
		pin, err := ParsePin(pinHex)
		if err != nil {
			t.Fatal(err)
		}
		d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 5 * time.Second}, Config: &tls.Config{
			InsecureSkipVerify:    true, // the pin is the trust decision
			VerifyPeerCertificate: VerifyPin(pin),
		}}
		c, err := d.Dial("tcp", ln.Addr().String())
		if err == nil {
			c.Close()
		}
		return err
	}
	if err := dial(Pin(cert)); err != nil {
		t.Errorf("matching pin refused: %v", err)
	}
	err = dial(Pin(other))
	want := "certificate pin mismatch: server presented sha256 " + Pin(cert) + ", expected " + Pin(other)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("wrong pin: err = %v, want it to contain %q", err, want)
	}
	if err := VerifyPin(make([]byte, 32))(nil, nil); err == nil {
		t.Error("no certificate accepted")
	}
}
