package main

import (
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
	"golang.org/x/term"
)

// TestRawAgainOnCont: a terminal made raw is made raw again on SIGCONT
// (after a job-control stop the shell gave it back cooked), until it is
// restored.
func TestRawAgainOnCont(t *testing.T) {
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Skipf("no pty: %v", err)
	}
	defer ptmx.Close()
	defer tty.Close()
	canonical := func() bool {
		tio, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
		if err != nil {
			t.Fatal(err)
		}
		return tio.Lflag&unix.ICANON != 0
	}
	cooked, err := term.GetState(int(tty.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	restore, err := makeRaw(tty)
	if err != nil {
		t.Fatal(err)
	}
	if canonical() {
		t.Fatal("not raw after makeRaw")
	}
	_ = term.Restore(int(tty.Fd()), cooked) // what the shell does on a stop
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for canonical() {
		if time.Now().After(deadline) {
			t.Fatal("still cooked 10 s after SIGCONT")
		}
		time.Sleep(time.Millisecond)
	}
	restore()
	if !canonical() {
		t.Error("not cooked after restore")
	}
	_ = syscall.Kill(syscall.Getpid(), syscall.SIGCONT)
	if !canonical() {
		t.Error("a SIGCONT after restore made it raw again")
	}
}
