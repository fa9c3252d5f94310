// Package lograte keeps repeated failures from flooding a log: per key,
// the first failure is logged in full and the ones within a window after
// it only counted, the count logged when the window ends.
package lograte

import (
	"cmp"
	"sync"
	"time"
)

// DefaultWindow is the window when First is given none.
const DefaultWindow = time.Second

// Limiter rate-limits log lines per key K: at most two lines per window
// and key (the first failure, then "N more like it"). Its entries last a
// window each, so it holds at most one entry per key active in the last
// window. The zero value is ready to use.
type Limiter[K comparable] struct {
	mu      sync.Mutex
	windows map[K]*count
	stopped bool
}

type count struct {
	n     int
	timer *time.Timer
}

// First reports whether a failure of key is to be logged in full: yes
// unless one was within the window (0: DefaultWindow) that the last full
// one opened, in which case it is counted, and more is called with the
// count (and the window) when the window ends.
func (l *Limiter[K]) First(key K, window time.Duration, more func(n int, window time.Duration)) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		return true
	}
	if w, ok := l.windows[key]; ok {
		w.n++
		return false
	}
	if l.windows == nil {
		l.windows = map[K]*count{}
	}
	window = cmp.Or(window, DefaultWindow)
	w := &count{}
	w.timer = time.AfterFunc(window, func() {
		l.mu.Lock()
		n := w.n
		if l.windows[key] == w {
			delete(l.windows, key)
		}
		l.mu.Unlock()
		if n > 0 {
			more(n, window)
		}
	})
	l.windows[key] = w
	return true
}

// Stop ends the windows (shutdown), calling more for each key with a
// count now; later failures are all logged in full.
func (l *Limiter[K]) Stop(more func(key K, n int)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stopped = true
	for k, w := range l.windows {
		if w.timer.Stop() && w.n > 0 {
			more(k, w.n)
		}
		delete(l.windows, k)
	}
}

// Len returns the keys with an open window.
func (l *Limiter[K]) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.windows)
}
