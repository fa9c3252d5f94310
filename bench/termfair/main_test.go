package main

import "testing"

func TestPercentile(t *testing.T) {
	xs := make([]float64, 100)
	for i := range xs {
		xs[i] = float64(100 - i) // 100..1, unsorted
	}
	for _, tc := range []struct {
		p    int
		want float64
	}{{50, 50}, {99, 99}, {100, 100}, {1, 1}} {
		if got := pct(xs, tc.p); got != tc.want {
			t.Errorf("pct(%d) = %v, want %v", tc.p, got, tc.want)
		}
	}
	if got := pct([]float64{7}, 50); got != 7 {
		t.Errorf("pct of one sample = %v, want 7", got)
	}
	if xs[0] != 100 {
		t.Error("pct sorted its input in place")
	}
}
