package tests

// The page's Logs panel in headless Chromium against the real binary:
// its sources come from the initialize result, a configured log file's
// lines appear in order as the test appends them, the text filter hides
// the others, Pause holds the list, and the panel holds its subscription
// only while it is shown.

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestWebPageLogs: a daemon with telemetry.log_files = [app.log] and no
// journal offers the daemon's log and app.log only; app.log's lines
// (the backlog, then each appended) are listed in order with the file's
// name; the text filter hides non-matching lines, new ones too; Pause
// keeps the list while records come, Resume shows them; hiding the
// panel ends its subscription on the host. The daemon's own log, at
// debug, shows another client's connection.
func TestWebPageLogs(t *testing.T) {
	chromiumPath(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "app.log")
	appendLog(t, path, "first line\n")
	s := startServer(t, fmt.Sprintf("telemetry {\n  log_files = [%q]\n  journal = \"off\"\n}\nmetrics {\n  listen = \"127.0.0.1:0\"\n}\n", path))
	var m []string
	if _, ok := s.p.stderr.waitMatch(waitTimeout, func(text string) bool {
		m = metricsLine.FindStringSubmatch(text)
		return m != nil
	}); !ok {
		t.Fatalf("no metrics listening line in the log:\n%s", tail(s.p.stderr.String(), 3000))
	}
	subscriptions := func(want float64) {
		t.Helper()
		const series = `sidecar_subscriptions{delivery="windowed",kind="log_files"}`
		var got float64
		for deadline := time.Now().Add(waitTimeout); ; {
			if got = scrapeMetrics(t, m[1])[series]; got == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s = %v after %v, want %v", series, got, waitTimeout, want)
			}
			time.Sleep(20 * time.Millisecond) // polling the endpoint: it has no event to wait on
		}
	}

	b := newBrowser(t)
	b.login(pageURL(s, ""), s.token)
	b.poll("connected", `document.getElementById("status").textContent.startsWith("connected")`, waitTimeout)

	b.must("logs", chromedp.Click("#logs-toggle", chromedp.ByID))
	// The sources: the daemon's log and the one file configured; no
	// journal (off), nothing the host does not list.
	var offered []string
	if err := b.eval(`[...document.querySelectorAll("#logs-source option")].map((o) => o.value)`, &offered); err != nil {
		t.Fatal(err)
	}
	if want := []string{"daemon", "file:" + path}; strings.Join(offered, "|") != strings.Join(want, "|") {
		t.Fatalf("sources offered %q, want %q", offered, want)
	}
	b.poll("the daemon's log followed", `sidecarPage.logs().channel === "ahp-otlp://logs"`, waitTimeout)
	// The daemon's log at debug: another client's connection is logged.
	b.must("debug", chromedp.Evaluate(`(() => { const s = document.getElementById("logs-level"); s.value = "debug"; s.dispatchEvent(new Event("change")); })()`, nil))
	b.poll("subscribed at debug", `sidecarPage.logs().channel === "ahp-otlp://logs?level=debug" && document.getElementById("logs-msg").textContent === ""`, waitTimeout)
	rc := s.dialRaw(t)
	b.poll("connection open, logged", `sidecarPage.logs().rows.some((r) => r.source === "sidecar.conn" && r.severity === "DEBUG" && r.level === "debug" && r.body === "connection open")`, waitTimeout)
	rc.close()

	b.must("choose app.log", chromedp.Evaluate(fmt.Sprintf(`(() => { const s = document.getElementById("logs-source"); s.value = %q; s.dispatchEvent(new Event("change")); })()`, "file:"+path), nil))
	rows := func(want ...string) string {
		w, _ := json.Marshal(want)
		return fmt.Sprintf(`JSON.stringify(sidecarPage.logs().rows.map((r) => r.source + " " + r.severity + " " + r.body)) === %q`, string(w))
	}
	b.poll("the backlog", rows("app.log - first line"), waitTimeout)
	var channel string
	if err := b.eval(`sidecarPage.logs().channel`, &channel); err != nil || channel != "ahp-otlp://logs/files?path="+strings.ReplaceAll(path, "/", "%2F") {
		t.Fatalf("channel %q (%v)", channel, err)
	}
	subscriptions(1)

	var all []string
	all = append(all, "app.log - first line")
	for i := 1; i <= 6; i++ {
		kind := "even"
		if i%2 == 1 {
			kind = "odd"
		}
		line := fmt.Sprintf("line %d is %s \x1b[1m", i, kind)
		appendLog(t, path, line+"\n")
		all = append(all, fmt.Sprintf("app.log - line %d is %s \\x1b[1m", i, kind))
		if i%3 == 0 {
			b.poll(fmt.Sprintf("line %d", i), rows(all...), waitTimeout)
		}
	}

	// The text filter, applied in the page: only matching lines, new ones too.
	b.must("filter", chromedp.SendKeys("#logs-filter", "ODD", chromedp.ByID))
	b.poll("odd lines only", rows("app.log - line 1 is odd \\x1b[1m", "app.log - line 3 is odd \\x1b[1m", "app.log - line 5 is odd \\x1b[1m"), waitTimeout)
	appendLog(t, path, "line 7 is odd\nline 8 is even\n")
	b.poll("line 7, not 8", rows("app.log - line 1 is odd \\x1b[1m", "app.log - line 3 is odd \\x1b[1m", "app.log - line 5 is odd \\x1b[1m", "app.log - line 7 is odd"), waitTimeout)
	b.poll("line 8 kept", `sidecarPage.logs().total === 9`, waitTimeout)
	b.screenshot("filtered")
	var total string
	if err := b.eval(`document.getElementById("logs-total").textContent`, &total); err != nil || total != "4 of 9 records" {
		t.Fatalf("total %q (%v), want 4 of 9 records", total, err)
	}
	b.must("clear the filter", chromedp.Evaluate(`(() => { const f = document.getElementById("logs-filter"); f.value = ""; f.dispatchEvent(new Event("input")); })()`, nil))
	all = append(all, "app.log - line 7 is odd", "app.log - line 8 is even")
	b.poll("every line again", rows(all...), waitTimeout)

	// Pause: records are kept, not shown, until Resume.
	b.must("pause", chromedp.Click("#logs-pause", chromedp.ByID))
	appendLog(t, path, "line 9 while paused\n")
	b.poll("kept while paused", `sidecarPage.logs().total === 10 && sidecarPage.logs().paused`, waitTimeout)
	b.poll("said", `document.getElementById("logs-total").textContent === "9 of 10 records · paused: 1 new"`, waitTimeout)
	b.screenshot("paused")
	b.must("resume", chromedp.Click("#logs-pause", chromedp.ByID))
	all = append(all, "app.log - line 9 while paused")
	b.poll("shown on resume", rows(all...), waitTimeout)

	// Hidden: the subscription ends; shown again: a new one, from the backlog.
	b.must("close", chromedp.Click("#logs-close", chromedp.ByID))
	b.poll("unsubscribed", `sidecarPage.logs().channel === ""`, waitTimeout)
	subscriptions(0)
	b.must("logs again", chromedp.Click("#logs-toggle", chromedp.ByID))
	b.poll("app.log again", `sidecarPage.logs().rows.length === 10 && sidecarPage.logs().rows[9].body === "line 9 while paused"`, waitTimeout)
	subscriptions(1)
}
