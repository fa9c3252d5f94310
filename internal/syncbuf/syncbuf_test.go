package syncbuf

import (
	"strings"
	"sync"
	"testing"
)

// TestBufferConcurrent: 8 writers of 100 lines each while the test reads;
// every line arrives whole (run with -race).
func TestBufferConcurrent(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				if n, err := b.Write([]byte{'a' + byte(w), '\n'}); n != 2 || err != nil {
					t.Errorf("Write: %d, %v", n, err)
				}
			}
		}()
	}
	for range 10 {
		_ = b.String()
	}
	wg.Wait()
	got := b.String()
	if len(got) != 8*100*2 || b.Len() != len(got) {
		t.Fatalf("%d bytes, want 1600", len(got))
	}
	for w := range 8 {
		if c := strings.Count(got, string(rune('a'+w))+"\n"); c != 100 {
			t.Errorf("writer %d: %d lines, want 100", w, c)
		}
	}
}
