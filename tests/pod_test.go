package tests

// The sidecar image (Containerfile, `make image`) in a pod beside an
// application, with real podman: the way it is deployed as a sidecar.
//
// podman runs rootful here, with runc (Debian's podman + runc; crun
// refuses the hybrid cgroup layout of some hosts), explicit ulimits (a
// runtime cannot raise them above the test's own), and the sidecar
// joined to the application's network and PID namespaces with
// --network container:APP --pid container:APP, what a Kubernetes pod
// with shareProcessNamespace gives (a podman pod's infra container cannot
// set those ulimits everywhere). Where podman is missing the test skips,
// and fails under CI=true (.ci/run installs it); where podman is present
// but cannot run a container (no privileges, no cgroups: a nested
// container), it skips under CI=true too, with podman's error printed.

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// podmanPath returns podman, or skips (fails under CI=true) without it.
func podmanPath(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("podman")
	if err != nil {
		msg := "no podman (apt-get install podman runc busybox-static): " + err.Error()
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	if _, err := os.Stat("/bin/busybox"); err != nil {
		msg := "no /bin/busybox for the image (apt-get install busybox-static)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return p
}

// podLimits are the flags every container of the test runs with.
var podLimits = []string{"--runtime", "runc", "--ulimit", "nofile=1000:1000", "--ulimit", "nproc=1000:1000"}

// podman runs podman with args to completion (bounded) and returns its
// combined output.
func podman(t *testing.T, bin string, timeout time.Duration, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	out := newStreamBuf()
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return "", err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return out.String(), err
	case <-time.After(timeout):
		_ = cmd.Process.Kill()
		<-done
		return out.String(), fmt.Errorf("podman %s: still running after %v", strings.Join(args, " "), timeout)
	}
}

// TestPodSidecarBesideApp builds the image once (make image), runs an
// application container (BusyBox httpd on 127.0.0.1:8080 only, the
// sidecar's port published from its network namespace) and the sidecar
// container joined to its network and PID namespaces, read-only, as user
// sidecar, with a memory and CPU limit, and checks from the host:
// `sidecar forward` reaches the application's loopback port (the page's
// exact bytes); `attach` gives a shell in the sidecar container (uid
// 10001, read-only /) that sees the application's httpd; `top --once`
// reports the container's limits (200 MiB, 0.50 CPUs); /readyz on the
// published metrics port answers "ready".
func TestPodSidecarBesideApp(t *testing.T) {
	bin := podmanPath(t)
	id := fmt.Sprintf("%d-%d", os.Getpid(), time.Now().UnixNano()%1e6)
	image := "localhost/sidecar-podtest:" + id
	// The image, once per test run, through the make target users run.
	dir := t.TempDir()
	build := exec.Command("make", "image", "IMAGE="+image, "IMAGE_DIR="+filepath.Join(dir, "image"))
	build.Dir = ".."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("make image: %v\n%s", err, tail(string(out), 3000))
	}
	t.Cleanup(func() { _, _ = podman(t, bin, time.Minute, "rmi", "-f", image) })

	// Can podman run a container here at all?
	if out, err := podman(t, bin, 2*time.Minute, append(append([]string{"run", "--rm"}, podLimits...), "--entrypoint", "/bin/true", image)...); err != nil {
		t.Skipf("podman cannot run a container in this environment (rootless without subuids, no cgroups, nested): %v\n%s", err, tail(out, 2000))
	}

	www := filepath.Join(dir, "www")
	page := []byte("hello from the application container " + id + "\n")
	if err := os.MkdirAll(www, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(www, "index.html"), page, 0o644); err != nil {
		t.Fatal(err)
	}
	port := freeLoopbackPort(t)
	metricsPort := freeLoopbackPort(t)
	app, sc := "sidecar-podtest-app-"+id, "sidecar-podtest-sc-"+id
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := podman(t, bin, 30*time.Second, "logs", sc)
			t.Logf("sidecar container's log:\n%s", tail(out, 4000))
		}
		// The sidecar first: podman removes no container another depends on.
		for _, c := range []string{sc, app} {
			if out, err := podman(t, bin, time.Minute, "rm", "-f", "-t", "0", c); err != nil {
				t.Errorf("podman rm %s: %v\n%s", c, err, out)
			}
		}
	})
	args := append([]string{"run", "-d", "--name", app}, podLimits...)
	args = append(args, "--read-only",
		"-p", fmt.Sprintf("127.0.0.1:%d:4433/tcp", port), "-p", fmt.Sprintf("127.0.0.1:%d:4433/udp", port),
		"-p", fmt.Sprintf("127.0.0.1:%d:9464/tcp", metricsPort),
		"-v", www+":/www:ro", "--entrypoint", "/bin/busybox", image, "httpd", "-f", "-p", "127.0.0.1:8080", "-h", "/www")
	if out, err := podman(t, bin, 2*time.Minute, args...); err != nil {
		t.Fatalf("podman run (application): %v\n%s", err, out)
	}
	const token = "pod-test-token"
	args = append([]string{"run", "-d", "--name", sc}, podLimits...)
	args = append(args, "--read-only", "--network", "container:"+app, "--pid", "container:"+app,
		"--memory", "200m", "--cpus", "0.5", "-e", "SIDECAR_TOKEN="+token, image)
	if out, err := podman(t, bin, 2*time.Minute, args...); err != nil {
		t.Fatalf("podman run (sidecar): %v\n%s", err, out)
	}

	// The attach line in the sidecar container's log gives the pin.
	logs := exec.Command(bin, "logs", "-f", sc)
	logBuf := newStreamBuf()
	logs.Stdout, logs.Stderr = logBuf, logBuf
	if err := logs.Start(); err != nil {
		t.Fatal(err)
	}
	logsDone := make(chan struct{})
	go func() { _ = logs.Wait(); close(logsDone) }()
	t.Cleanup(func() { _ = logs.Process.Kill(); <-logsDone })
	attachRE := regexp.MustCompile(`sidecar attach wss://127\.0\.0\.1:4433/ahp --token "\$SIDECAR_TOKEN" --cert-hash ([0-9a-f]{64})\n`)
	var m []string
	if text, ok := logBuf.waitMatch(waitTimeout, func(s string) bool { m = attachRE.FindStringSubmatch(s); return m != nil }); !ok {
		t.Fatalf("no attach line from the sidecar container:\n%s", tail(text, 3000))
	}
	url := fmt.Sprintf("wss://127.0.0.1:%d/ahp", port)
	conn := []string{"--token", token, "--cert-hash", m[1]}

	// Readiness through the published metrics port.
	if code, body := probe(t, fmt.Sprintf("127.0.0.1:%d", metricsPort), "/readyz"); code != http.StatusOK || body != "ready\n" {
		t.Errorf("GET /readyz = %d %q, want 200 ready", code, body)
	}

	// forward: the application's loopback-only port, from the host.
	fport := freeLoopbackPort(t)
	fw := start(t, append(append([]string{"forward", url}, conn...), "-L", fmt.Sprintf("127.0.0.1:%d:127.0.0.1:8080", fport))...)
	fw.stderr.waitFor(t, "forward ready", 0, "forwarding 127.0.0.1:")
	resp, err := (&http.Client{Timeout: waitTimeout}).Get(fmt.Sprintf("http://127.0.0.1:%d/index.html", fport))
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if want, have := sha256.Sum256(page), sha256.Sum256(got); have != want {
		t.Errorf("through forward: %q (sha256 %s), want %q (%s)", got, hex.EncodeToString(have[:]), page, hex.EncodeToString(want[:]))
	}

	// attach: a shell in the sidecar container that sees the app's processes.
	att := startInPTYSize(t, 200, 40, append([]string{"attach", url}, conn...)...)
	att.typeText(t, "echo uid=$(id -u); touch /etc/x 2>/dev/null || echo rootfs=ro; ps -o pid,user,args | grep -c '[h]ttpd -f -p 127.0.0.1:8080' | sed s/^/httpd=/\r")
	for _, want := range []string{"uid=10001", "rootfs=ro", "httpd=1"} {
		att.out.waitFor(t, want, 0, want+"\r\n")
	}
	att.typeText(t, "exit\r")
	if code := att.wait(t); code != 0 {
		t.Errorf("attach exited %d after the shell's exit, want 0", code)
	}

	// top: the container's cgroup limits.
	stdout, stderr, code := (&server{}).run(t, append(append([]string{"top", url}, conn...), "--once")...)
	limits := regexp.MustCompile(`Container  mem \S+ / 200\.0M  cpu.* of 0\.50 CPUs`)
	if code != 0 || !limits.MatchString(stdout) {
		t.Errorf("top --once exited %d; want a line with the limits 200.0M and 0.50 CPUs:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
}
