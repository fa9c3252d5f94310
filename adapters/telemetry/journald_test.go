package telemetry

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	logspb "go.opentelemetry.io/proto/otlp/logs/v1"

	"github.com/sidecar-dev/sidecar/rpc"
)

// entryJSON is one journal entry as journalctl -o json prints it.
func entryJSON(cursor, unit string, prio int, msg string) string {
	return fmt.Sprintf(`{"__CURSOR":%q,"__REALTIME_TIMESTAMP":"1767225600%06d","_SYSTEMD_UNIT":%q,"PRIORITY":"%d","SYSLOG_IDENTIFIER":"app","_PID":"4242","_COMM":"app","_HOSTNAME":"vm","MESSAGE":%q}`+"\n",
		cursor, len(cursor), unit, prio, msg)
}

// fakeJournal makes testdata/journalctl the journal's program, reading
// a journal file in a temporary directory.
func fakeJournal(t *testing.T) (dir string, prog string) {
	t.Helper()
	dir = t.TempDir()
	t.Setenv("FAKE_JOURNAL_DIR", dir)
	prog, err := filepath.Abs("testdata/journalctl")
	if err != nil {
		t.Fatal(err)
	}
	return dir, prog
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return string(b)
}

// TestJournalFollowRestart drives the journal channel through a fake
// journalctl: the backlog run (filtered by unit in the sidecar as well),
// the follow from the last cursor, journalctl killed on the last
// unsubscribe, and started again after the cursor on the next subscribe.
func TestJournalFollowRestart(t *testing.T) {
	dir, prog := fakeJournal(t)
	journal := filepath.Join(dir, "journal")
	appendFile(t, journal, entryJSON("c1", "a.service", 6, "b1")+entryJSON("c2", "other.service", 6, "b2")+entryJSON("c3", "a.service", 3, "b3"))
	hl := testHostLogs()
	hl.cfg.Journal, hl.cfg.Journalctl = true, prog
	defer hl.Close()
	uri := rpc.JournalChannel + "?unit=a"
	ch, e := hl.Channel(uri)
	if e != nil {
		t.Fatal(e)
	}
	s := newOrdSub("c", true)
	ch.Subscribe(s)
	waitFor(t, "backlog", s, func() bool { b, _ := s.bodies(t); return len(b) == 2 })
	// Append once the follow runs (else the backlog's cat may read it).
	waitFor(t, "journalctl --follow", s, func() bool {
		return strings.Count(readFile(t, filepath.Join(dir, "args")), "\n") == 2
	})
	appendFile(t, journal, entryJSON("c4", "other.service", 7, "f-other")+entryJSON("c5", "a.service", 7, "f1"))
	waitFor(t, "follow", s, func() bool { b, _ := s.bodies(t); return len(b) == 3 })
	if b, _ := s.bodies(t); strings.Join(b, ",") != "b1,b3,f1" {
		t.Fatalf("got %v", b)
	}
	args := strings.Split(strings.TrimSpace(readFile(t, filepath.Join(dir, "args"))), "\n")
	want := []string{
		"--output=json --no-pager --quiet --unit=a.service --lines=100",
		"--output=json --no-pager --quiet --unit=a.service --follow --after-cursor=c3",
	}
	if strings.Join(args, "\n") != strings.Join(want, "\n") {
		t.Fatalf("journalctl ran with\n%s\nwant\n%s", strings.Join(args, "\n"), strings.Join(want, "\n"))
	}

	// The last unsubscribe kills journalctl (its process group: tail and
	// awk too).
	pids := strings.Fields(readFile(t, filepath.Join(dir, "pids")))
	follower, _ := strconv.Atoi(pids[len(pids)-1])
	ch.Unsubscribe(s)
	deadline := time.Now().Add(10 * time.Second)
	for syscall.Kill(-follower, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatal("journalctl's process group still runs after the last unsubscribe")
		}
		time.Sleep(5 * time.Millisecond)
	}

	// Entries written meanwhile come on the next subscribe, after the
	// ring's backlog, from the cursor.
	appendFile(t, journal, entryJSON("c6", "a.service", 4, "f2"))
	s2 := newOrdSub("c2", true)
	ch, _ = hl.Channel(uri)
	ch.Subscribe(s2)
	waitFor(t, "restart", s2, func() bool { b, _ := s2.bodies(t); return len(b) == 4 })
	if b, sk := s2.bodies(t); strings.Join(b, ",") != "b1,b3,f1,f2" || sk != 0 {
		t.Fatalf("after the restart: %v, skipped %d", b, sk)
	}
	args = strings.Split(strings.TrimSpace(readFile(t, filepath.Join(dir, "args"))), "\n")
	if last := args[len(args)-1]; last != "--output=json --no-pager --quiet --unit=a.service --follow --after-cursor=c5" {
		t.Fatalf("restarted with %q", last)
	}
	ch.Unsubscribe(s2)
}

// TestJournalEntry: severity by PRIORITY as the collector's journald
// receiver maps it, the attributes, a binary MESSAGE, the filters and
// the window.
func TestJournalEntry(t *testing.T) {
	want := []struct {
		num  logspb.SeverityNumber
		text string
	}{{21, "emerg"}, {19, "alert"}, {18, "crit"}, {17, "err"}, {13, "warning"}, {10, "notice"}, {9, "info"}, {5, "debug"}}
	for p, w := range want {
		j := &journalReader{filter: journalFilter{priority: 7}}
		rec, ok, done := j.entry([]byte(entryJSON("c", "a.service", p, "m")))
		if !ok || done || rec.Severity != w.num || rec.SeverityText != w.text {
			t.Errorf("PRIORITY %d: %v %v %v %q, want %v %q", p, ok, done, rec.Severity, rec.SeverityText, w.num, w.text)
		}
	}
	j := &journalReader{filter: journalFilter{priority: 7}}
	rec, _, _ := j.entry([]byte(entryJSON("cur", "a.service", 6, "hello")))
	got := map[string]string{}
	for _, a := range rec.Attrs {
		v := a.Value.GetStringValue()
		if v == "" {
			v = strconv.FormatInt(a.Value.GetIntValue(), 10)
		}
		got[a.Key] = v
	}
	if fmt.Sprint(got) != "map[host.name:vm process.executable.name:app process.pid:4242 syslog.identifier:app systemd.unit:a.service]" {
		t.Errorf("attributes %v", got)
	}
	if rec.Body != "hello" || rec.Time != time.UnixMicro(1767225600000003) || j.cursor != "cur" {
		t.Errorf("record %q at %v, cursor %q", rec.Body, rec.Time, j.cursor)
	}
	rec, ok, _ := j.entry([]byte(`{"__CURSOR":"b","MESSAGE":[104,105,255]}`))
	if !ok || rec.Body != "hi\uFFFD" || rec.SeverityText != "info" {
		t.Errorf("binary message: %v %q %q", ok, rec.Body, rec.SeverityText)
	}
	j.filter = journalFilter{priority: 4, unit: "a.service",
		since: time.UnixMicro(1767225600000002), until: time.UnixMicro(1767225600000004)}
	for _, tt := range []struct {
		line     string
		ok, done bool
	}{
		{entryJSON("cc", "a.service", 4, "in"), true, false},
		{entryJSON("cc", "a.service", 5, "notice: below warning"), false, false},
		{entryJSON("cc", "b.service", 3, "other unit"), false, false},
		{entryJSON("c", "a.service", 3, "before since"), false, false},
		{entryJSON("ccccc", "a.service", 3, "after until"), false, true},
		{`not json`, false, false},
	} {
		if _, ok, done := j.entry([]byte(tt.line)); ok != tt.ok || done != tt.done {
			t.Errorf("%s: ok %v done %v, want %v %v", tt.line, ok, done, tt.ok, tt.done)
		}
	}
}

// TestJournalEntryBound: an entry over maxJournalEntryBytes is skipped
// and counted, the next one read; a MESSAGE over MaxLineBytes is cut.
func TestJournalEntryBound(t *testing.T) {
	dir, prog := fakeJournal(t)
	huge := entryJSON("c1", "a.service", 6, strings.Repeat("z", maxJournalEntryBytes))
	long := entryJSON("c2", "a.service", 6, strings.Repeat("l", MaxLineBytes+1))
	appendFile(t, filepath.Join(dir, "journal"), huge+long+entryJSON("c3", "a.service", 6, "ok"))
	hl := testHostLogs()
	hl.cfg.Journal, hl.cfg.Journalctl = true, prog
	defer hl.Close()
	ch, e := hl.Channel(rpc.JournalChannel)
	if e != nil {
		t.Fatal(e)
	}
	s := newOrdSub("c", true)
	ch.Subscribe(s)
	defer ch.Unsubscribe(s)
	waitFor(t, "two records", s, func() bool { b, _ := s.bodies(t); return len(b) == 2 })
	b, _ := s.bodies(t)
	if b[0] != strings.Repeat("l", MaxLineBytes)+"…" || b[1] != "ok" {
		t.Fatalf("got %d and %q", len(b[0]), b[1])
	}
	if hl.Truncated() != 2 {
		t.Errorf("Truncated() = %d, want 2 (one skipped, one cut)", hl.Truncated())
	}
}

// TestJournalReal follows the real journal: a `logger` line appears with
// its severity. It skips, saying why, where there is no journal.
func TestJournalReal(t *testing.T) {
	if ok, why := JournalAvailable("auto", "journalctl"); !ok {
		t.Skip("no systemd journal here: " + why)
	}
	if _, err := exec.LookPath("logger"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("no logger:", err)
		}
		t.Skip("no logger:", err)
	}
	hl := testHostLogs()
	hl.cfg.Journal, hl.cfg.Journalctl = true, "journalctl"
	defer hl.Close()
	tag := fmt.Sprintf("sidecar-test-%d", os.Getpid())
	ch, e := hl.Channel(rpc.JournalChannel + "?priority=warning")
	if e != nil {
		t.Fatal(e)
	}
	s := newOrdSub("c", true)
	ch.Subscribe(s)
	defer ch.Unsubscribe(s)
	for _, args := range [][]string{{"-p", "user.info", "-t", tag, "not shown"}, {"-p", "user.warning", "-t", tag, "warned"}} {
		if out, err := exec.Command("logger", args...).CombinedOutput(); err != nil {
			t.Fatalf("logger: %v %s", err, out)
		}
	}
	waitFor(t, "the logger line", s, func() bool {
		b, _ := s.bodies(t)
		for _, x := range b {
			if x == "warned" {
				return true
			}
			if x == "not shown" {
				t.Fatal("an info line passed priority=warning")
			}
		}
		return false
	})
}
