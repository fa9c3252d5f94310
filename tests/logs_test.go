package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func appendLog(t *testing.T, path, text string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(text); err != nil {
		t.Fatal(err)
	}
	f.Close()
}

// logLine is how `sidecar logs` prints a file's line: time, severity
// (none: -), the file's name, the line.
var logLine = regexp.MustCompile(`(?m)^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\S* - +(\S+): (.*)$`)

// bodies returns the lines `sidecar logs` printed, as "file: line".
func bodies(out string) []string {
	var b []string
	for _, m := range logLine.FindAllStringSubmatch(out, -1) {
		b = append(b, m[1]+": "+m[2])
	}
	return b
}

// TestLogsFiles: `sidecar logs --file` against a real daemon following a
// configured glob: without -f it prints the file's lines and exits; with
// -f every line appended, across a rotation (rename and a new file) and
// a truncation, comes once and in order; a file outside
// telemetry.log_files is refused naming the rule.
func TestLogsFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "app.log")
	appendLog(t, path, "first\nsecond\n")
	s := startServer(t, fmt.Sprintf("telemetry {\n  log_files = [%q]\n}\n", filepath.Join(dir, "*.log")))

	out, errOut, code := s.run(t, append([]string{"logs", s.url, "--file", path}, s.connArgs()...)...)
	if code != 0 || strings.Join(bodies(out), "|") != "app.log: first|app.log: second" {
		t.Fatalf("logs without -f: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}

	out, errOut, code = s.run(t, append([]string{"logs", s.url, "--file", "/etc/passwd"}, s.connArgs()...)...)
	want := fmt.Sprintf("sidecar: ahp-otlp://logs/files?path=%%2Fetc%%2Fpasswd: /etc/passwd is not in telemetry.log_files (%s): only those files may be followed\n", filepath.Join(dir, "*.log"))
	if code != 1 || out != "" || errOut != want {
		t.Fatalf("outside the config: exit %d\nstdout: %q\nstderr: %q\nwant %q", code, out, errOut, want)
	}

	p := start(t, append([]string{"logs", s.url, "--file", filepath.Join(dir, "*.log"), "-f"}, s.connArgs()...)...)
	p.stdout.waitFor(t, "the backlog", 0, "second\n")
	appendLog(t, path, "a1\na2\n")
	p.stdout.waitFor(t, "a2", 0, "a2\n")
	// Rotation: renamed to a name the glob does not match, a new file.
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, "a3 late\n")
	f.Close()
	appendLog(t, path, "b1\nb2 which is longer\n")
	p.stdout.waitFor(t, "b2", 0, "b2 which is longer\n")
	// Truncation: shorter than what was read.
	if err := os.WriteFile(path, []byte("c1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p.stdout.waitFor(t, "c1", 0, "c1\n")
	appendLog(t, path, "c2\n")
	p.stdout.waitFor(t, "c2", 0, "c2\n")
	got := strings.Join(bodies(p.stdout.String()), "|")
	if want := "app.log: first|app.log: second|app.log: a1|app.log: a2|app.log: a3 late|app.log: b1|app.log: b2 which is longer|app.log: c1|app.log: c2"; got != want {
		t.Fatalf("sidecar logs -f printed\n%s\nwant\n%s", got, want)
	}
}

// TestLogsJournalFake: the journal channel through the real daemon, with
// a fake journalctl on its PATH (adapters/telemetry/testdata): `sidecar
// logs --unit` prints the unit's entries with their severity and source,
// `--level` filters them.
func TestLogsJournalFake(t *testing.T) {
	fake, err := filepath.Abs("../adapters/telemetry/testdata/journalctl")
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	if err := os.Symlink(fake, filepath.Join(bin, "journalctl")); err != nil {
		t.Fatal(err)
	}
	jdir := t.TempDir()
	entry := func(cursor, unit string, prio int, msg string) string {
		return fmt.Sprintf(`{"__CURSOR":%q,"__REALTIME_TIMESTAMP":"1767225600000000","_SYSTEMD_UNIT":%q,"PRIORITY":"%d","SYSLOG_IDENTIFIER":"web","_PID":"812","MESSAGE":%q}`+"\n", cursor, unit, prio, msg)
	}
	appendLog(t, filepath.Join(jdir, "journal"), entry("c1", "web.service", 6, "started")+entry("c2", "db.service", 6, "other")+entry("c3", "web.service", 3, "failed: disk full"))
	s := startServerVia(t, []string{"env", "PATH=" + bin + ":" + os.Getenv("PATH"), "FAKE_JOURNAL_DIR=" + jdir}, "", terminalConfig, "telemetry {\n  journal = \"on\"\n}\n")

	out, errOut, code := s.run(t, append([]string{"logs", s.url, "--unit", "web"}, s.connArgs()...)...)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 2 ||
		!regexp.MustCompile(`^2026-01-01T\S+ info    web\[812\]: started$`).MatchString(lines[0]) ||
		!regexp.MustCompile(`^2026-01-01T\S+ err     web\[812\]: failed: disk full$`).MatchString(lines[1]) {
		t.Fatalf("logs --unit web: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	out, errOut, code = s.run(t, append([]string{"logs", s.url, "--unit", "web", "--level", "error", "--json"}, s.connArgs()...)...)
	if code != 0 || strings.Count(out, "\n") != 1 || !strings.Contains(out, `"severityNumber":17,"severityText":"err","body":{"stringValue":"failed: disk full"}`) ||
		!strings.Contains(out, `{"key":"systemd.unit","value":{"stringValue":"web.service"}}`) {
		t.Fatalf("--level error --json: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
}
