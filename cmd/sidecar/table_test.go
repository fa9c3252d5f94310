package main

import (
	"strings"
	"testing"
)

// TestTableWideCharacters: columns after a CJK title (two terminal columns
// a character) or one with a combining mark (none) stay aligned, where
// text/tabwriter counted runes.
func TestTableWideCharacters(t *testing.T) {
	var tb table
	tb.row("TERMINAL", "TITLE", "STATUS")
	tb.row("t1", "日本語", "running")
	tb.row("t2", "cafe\u0301", "exited (0)")
	tb.row("t3", "plain-title", "running")
	var b strings.Builder
	if err := tb.write(&b); err != nil {
		t.Fatal(err)
	}
	want := "TERMINAL  TITLE        STATUS\n" +
		"t1        日本語       running\n" +
		"t2        cafe\u0301         exited (0)\n" +
		"t3        plain-title  running\n"
	if b.String() != want {
		t.Fatalf("table:\n%s\nwant:\n%s", b.String(), want)
	}
}
