package lograte

import (
	"testing"
	"time"
)

// TestLimiter: the first failure of a key is in full, the rest of its
// window counted and reported once when it ends; keys are independent;
// Stop reports what was counted and lets every later one through.
func TestLimiter(t *testing.T) {
	var l Limiter[string]
	counts := make(chan int, 4)
	more := func(n int, _ time.Duration) { counts <- n }
	if !l.First("a", 20*time.Millisecond, more) {
		t.Fatal("first failure not in full")
	}
	for range 3 {
		if l.First("a", 20*time.Millisecond, more) {
			t.Fatal("a failure within the window was in full")
		}
	}
	if !l.First("b", time.Hour, more) {
		t.Fatal("another key shares the window")
	}
	select {
	case n := <-counts:
		if n != 3 {
			t.Errorf("counted %d, want 3", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no count when the window ended")
	}
	if l.Len() != 1 {
		t.Errorf("%d windows open, want 1 (b)", l.Len())
	}
	l.First("b", time.Hour, more)
	var stopped []string
	l.Stop(func(k string, n int) { stopped = append(stopped, k) })
	if len(stopped) != 1 || stopped[0] != "b" || l.Len() != 0 {
		t.Errorf("Stop reported %v with %d open, want [b] and none", stopped, l.Len())
	}
	if !l.First("b", time.Hour, more) {
		t.Error("after Stop a failure was not in full")
	}
}
