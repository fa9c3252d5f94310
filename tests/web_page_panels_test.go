package tests

// The page's panels beyond the terminals, in headless Chromium against
// the real binary: uploads by drag and drop (and their cancel), downloads
// through GET web/files, the process list and its signal action, the
// sparklines of the machine's last minutes, and every client's forwards.

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
)

// randomFile writes size random bytes to dir/name and returns its path and SHA-256.
func randomFile(t *testing.T, dir, name string, size int) (string, string) {
	t.Helper()
	b := make([]byte, size)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return p, hex.EncodeToString(sum[:])
}

func fileSum(t *testing.T, p string) string {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// dropFile drags the file at path from outside the page onto the middle
// of the terminals' area, as a person's drag and drop does (DevTools
// Input.dispatchDragEvent with the file).
func (b *browser) dropFile(path string) {
	b.t.Helper()
	var box struct{ X, Y float64 }
	if err := b.eval(`(() => { const r = document.getElementById("terms").getBoundingClientRect(); return {x: r.left + r.width / 2, y: r.top + r.height / 2}; })()`, &box); err != nil {
		b.t.Fatal(err)
	}
	data := &input.DragData{Items: []*input.DragDataItem{}, Files: []string{path}, DragOperationsMask: 1}
	b.must("drag and drop "+path, chromedp.ActionFunc(func(ctx context.Context) error {
		for _, typ := range []input.DispatchDragEventType{input.DragEnter, input.DragOver, input.Drop} {
			if err := input.DispatchDragEvent(typ, box.X, box.Y, data).Do(ctx); err != nil {
				return fmt.Errorf("%s: %w", typ, err)
			}
		}
		return nil
	}))
}

// TestWebPageFiles: a file dropped on a terminal lands in its working
// directory (OSC 7) with the same SHA-256 as `sha256sum` typed in the
// terminal says; it downloads back through GET web/files, with the
// page's cookie in the browser (streamed to disk) and with the token in
// Go (Range too); a cancelled upload leaves nothing at its target name.
func TestWebPageFiles(t *testing.T) {
	chromiumPath(t)
	s := startServer(t, "")
	b := newBrowser(t)
	b.login(pageURL(s, "websocket"), s.token)
	b.poll("connected", `document.getElementById("status").textContent === "connected (WebSocket)"`, waitTimeout)
	b.must("new terminal", chromedp.Click("#new", chromedp.ByID))
	b.poll("prompt", screenHas(`^XPROMPT>`), waitTimeout)

	// The shell says where it is with OSC 7, as bash or zsh set up for it do.
	dir := t.TempDir()
	b.cdWithOSC7(dir)

	const name = "up load.bin"
	src, sum := randomFile(t, t.TempDir(), name, 5<<20+123)
	b.dropFile(src)
	b.poll("upload done", `sidecarPage.uploads().some((u) => u.phase === "done")`, waitTimeout)
	var ups []struct {
		Target, Phase string
		Size, Sent    int
	}
	if err := b.eval(`sidecarPage.uploads()`, &ups); err != nil || len(ups) != 1 || ups[0].Target != filepath.Join(dir, name) || ups[0].Sent != 5<<20+123 {
		t.Fatalf("uploads %+v (%v), want one to %s", ups, err, filepath.Join(dir, name))
	}
	b.typeText("sha256sum 'up load.bin'\r")
	b.poll("sha256sum in the terminal", screenHas(`^`+sum+`  up load.bin$`), waitTimeout)
	if got := fileSum(t, filepath.Join(dir, name)); got != sum {
		t.Fatalf("uploaded file SHA-256 %s, want %s", got, sum)
	}

	// Download with the token (Go), whole and a range.
	tr := &http.Transport{TLSClientConfig: s.tlsConfig()}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: waitTimeout}
	get := func(path string, hdr map[string]string) (*http.Response, []byte) {
		req, _ := http.NewRequest("GET", "https://"+s.host+"/web/files?path="+url.QueryEscape(path), nil)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		res, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatal(err)
		}
		return res, body
	}
	bearer := map[string]string{"Authorization": "Bearer " + s.token}
	res, body := get(filepath.Join(dir, name), bearer)
	if got := sha256.Sum256(body); res.StatusCode != 200 || hex.EncodeToString(got[:]) != sum || res.Header.Get("Content-Length") != strconv.Itoa(5<<20+123) {
		t.Fatalf("download: %d, %d bytes, Content-Length %s", res.StatusCode, len(body), res.Header.Get("Content-Length"))
	}
	if cd := res.Header.Get("Content-Disposition"); !strings.HasPrefix(cd, "attachment;") || !strings.Contains(cd, `filename="up load.bin"`) {
		t.Errorf("Content-Disposition %q", cd)
	}
	all, _ := os.ReadFile(src)
	res, body = get(filepath.Join(dir, name), map[string]string{"Authorization": "Bearer " + s.token, "Range": "bytes=5242880-"})
	if res.StatusCode != 206 || string(body) != string(all[5<<20:]) {
		t.Errorf("range: %d, %d bytes", res.StatusCode, len(body))
	}
	if res, _ = get(filepath.Join(dir, name), nil); res.StatusCode != 401 {
		t.Errorf("without a login: %d, want 401", res.StatusCode)
	}
	if res, _ = get(filepath.Join(dir, name), map[string]string{"Authorization": "Bearer " + s.token, "Sec-Fetch-Site": "cross-site"}); res.StatusCode != 403 {
		t.Errorf("cross-site: %d, want 403", res.StatusCode)
	}

	// Download in the browser: the Files dialog opens in the terminal's
	// directory, its link streams the file to disk with the page's cookie.
	dl := t.TempDir()
	b.must("downloads", cdpbrowser.SetDownloadBehavior(cdpbrowser.SetDownloadBehaviorBehaviorAllow).WithDownloadPath(dl))
	b.must("files dialog", chromedp.Click("#files-open", chromedp.ByID))
	link := fmt.Sprintf(`#files-list a[download=%q]`, name)
	b.poll("listed", fmt.Sprintf(`document.querySelector(%q) !== null`, link), waitTimeout)
	b.must("download", chromedp.Click(link, chromedp.ByQuery))
	deadline := time.Now().Add(waitTimeout)
	for {
		if fi, err := os.Stat(filepath.Join(dl, name)); err == nil && fi.Size() == 5<<20+123 {
			break
		}
		if time.Now().After(deadline) {
			ents, _ := os.ReadDir(dl)
			t.Fatalf("no download in %s within %v (%v)", dl, waitTimeout, ents)
		}
		time.Sleep(20 * time.Millisecond) // a bounded poll of the download folder
	}
	if got := fileSum(t, filepath.Join(dl, name)); got != sum {
		t.Fatalf("browser download SHA-256 %s, want %s", got, sum)
	}
	b.must("close the dialog", chromedp.Click("#files-close", chromedp.ByID))

	// Cancel: a larger file chosen with Upload…, cancelled while it is
	// sent (the page slowed down so that it is still under way).
	big, _ := randomFile(t, t.TempDir(), "big.bin", 96<<20)
	b.must("throttle", emulation.SetCPUThrottlingRate(4))
	b.must("choose a file", chromedp.SetUploadFiles("#upload-file", []string{big}, chromedp.ByID))
	b.poll("sending", `sidecarPage.uploads().some((u) => u.phase === "sending" && u.sent > 0)`, waitTimeout)
	b.must("cancel", chromedp.Click(`#uploads li[data-phase="sending"] .cancel`, chromedp.ByQuery))
	b.poll("cancelled", `sidecarPage.uploads().some((u) => u.phase === "cancelled" && u.target.endsWith("/big.bin"))`, waitTimeout)
	b.must("unthrottle", emulation.SetCPUThrottlingRate(1))
	// The host reset the channel: the partial file is closed, never renamed.
	b.typeText("ls -a; echo LISTED\r")
	b.poll("listed", screenHas(`^LISTED$`), waitTimeout)
	if _, err := os.Stat(filepath.Join(dir, "big.bin")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("after cancel, big.bin exists (%v)", err)
	}
}

// TestWebPageProcesses: a sleep the test started is listed with its pid;
// Signal… → SIGTERM from the page ends it; the sparklines have points.
func TestWebPageProcesses(t *testing.T) {
	chromiumPath(t)
	s := startServer(t, "")
	cmd := exec.Command("sleep", "3127")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	pid := cmd.Process.Pid

	b := newBrowser(t)
	b.login(pageURL(s, ""), s.token)
	b.poll("connected", `document.getElementById("status").textContent.startsWith("connected")`, waitTimeout)
	b.poll("sparklines with points", `(() => { const s = sidecarPage.sparks(); return s.cpu >= 2 && s.memory >= 2 && s.network >= 2 && s.disk >= 2; })()`, waitTimeout)

	b.must("processes", chromedp.Click("#procs-toggle", chromedp.ByID))
	b.must("newest first", chromedp.Click(`#procs-head th[data-key="start"] button`, chromedp.ByQuery))
	row := fmt.Sprintf(`#procs-body tr[data-pid="%d"]`, pid)
	b.poll("sleep listed", fmt.Sprintf(`(() => { const r = document.querySelector(%q); return r !== null && r.textContent.includes("sleep 3127"); })()`, row), waitTimeout)
	b.must("signal", chromedp.Click(row+" .signal", chromedp.ByQuery))
	b.must("confirm", chromedp.WaitVisible("#signal-dialog", chromedp.ByID), chromedp.Click("#signal-send", chromedp.ByID))
	select {
	case err := <-exited:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGTERM {
			t.Fatalf("sleep ended with %v, want SIGTERM", err)
		}
		exited <- err // for the cleanup
	case <-time.After(waitTimeout):
		t.Fatal("sleep did not end within", waitTimeout)
	}
	b.poll("said", `document.getElementById("procs-msg").textContent.startsWith("SIGTERM sent to sleep")`, waitTimeout)
}

// TestWebPageForwards: a `sidecar forward -R` and a `-L` of other
// clients are shown in the ports panel with their direction and state.
func TestWebPageForwards(t *testing.T) {
	chromiumPath(t)
	s := startServer(t, "")
	b := newBrowser(t)
	b.login(pageURL(s, ""), s.token)
	b.poll("connected", `document.getElementById("status").textContent.startsWith("connected")`, waitTimeout)
	b.poll("no forwards", `document.querySelector("#forwards li.empty") !== null`, waitTimeout)

	free := func() int {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return l.Addr().(*net.TCPAddr).Port
	}
	lport := free()
	fw, addrs := reverseStart(t, s, "-R 0:127.0.0.1:9", fmt.Sprintf("-L %d:127.0.0.1:9", lport))
	defer fw.p.kill(t)
	b.poll("-R and -L ready", fmt.Sprintf(`(() => { const f = sidecarPage.forwards(); return f.length === 2 && f.some((x) => x.direction === "clientToHost" && x.state === "ready" && x.text.includes(%q)) && f.some((x) => x.direction === "hostToClient" && x.state === "ready" && x.text.includes("client 127.0.0.1:%d")); })()`, "workload "+addrs[0], lport), waitTimeout)
	fw.p.kill(t)
	b.poll("unavailable or gone", `sidecarPage.forwards().every((x) => x.state !== "ready")`, waitTimeout)
}
