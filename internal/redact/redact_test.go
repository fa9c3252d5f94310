package redact

import (
	"strings"
	"testing"
)

func TestText(t *testing.T) {
	const sec = "s3cr3t-t0ken-value"
	for _, tt := range []struct{ in, want string }{
		{"GET /ahp?token=abc123 404", "GET /ahp?token=REDACTED 404"},
		{"/transport-io?x=1&token=abc&y=2", "/transport-io?x=1&token=REDACTED&y=2"},
		{"/t?ticket=tk-1;a=b", "/t?ticket=REDACTED;a=b"},
		{"/t?TOKEN=abc", "/t?TOKEN=REDACTED"},
		{`{"url":"/ahp?a=1\u0026token=abc\u0026b=2"}`, `{"url":"/ahp?a=1\u0026token=REDACTED\u0026b=2"}`},
		{`path="/ahp?token=abc" status=404`, `path="/ahp?token=REDACTED" status=404`},
		{"token_generated=true token=abc", "token_generated=true token=REDACTED"},
		{"Authorization: Bearer " + sec, "Authorization: Bearer REDACTED"},
		{"no credentials here", "no credentials here"},
	} {
		if got := Text(tt.in, sec, "short"); got != tt.want {
			t.Errorf("Text(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	// A secret under MinSecretBytes is not replaced: it would take
	// ordinary words out of every line.
	if got := Text("a short word", "short"); got != "a short word" {
		t.Errorf("short secret replaced: %q", got)
	}
}

func TestWriter(t *testing.T) {
	var b strings.Builder
	w := NewWriter(&b)
	line := "peer=1.2.3.4 path=/x?token=abc other=SECRET-VALUE-1\n"
	if n, err := w.Write([]byte(line)); n != len(line) || err != nil {
		t.Fatalf("Write = %d, %v", n, err)
	}
	w.AddSecret("SECRET-VALUE-1")
	if _, err := w.Write([]byte(line)); err != nil {
		t.Fatal(err)
	}
	want := "peer=1.2.3.4 path=/x?token=REDACTED other=SECRET-VALUE-1\n" +
		"peer=1.2.3.4 path=/x?token=REDACTED other=REDACTED\n"
	if b.String() != want {
		t.Errorf("got %q, want %q", b.String(), want)
	}
}
