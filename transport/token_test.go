package transport

import (
	"strings"
	"testing"
)

// TestTokenEqual: equal tokens match, anything else does not (an empty
// want never does), and what is compared in constant time is always two
// SHA-256 digests, whatever the lengths: a comparison of the raw tokens
// returns early on a length mismatch and so tells the length.
func TestTokenEqual(t *testing.T) {
	want := "s3cr3t-token-of-43-characters-xxxxxxxxxxxx"
	var lens [][2]int
	old := ctCompare
	defer func() { ctCompare = old }()
	ctCompare = func(a, b []byte) int {
		lens = append(lens, [2]int{len(a), len(b)})
		if string(a) == string(b) {
			return 1
		}
		return 0
	}
	for _, tc := range []struct {
		got, want string
		ok        bool
	}{
		{want, want, true},
		{want[:10], want, false},
		{want + "x", want, false},
		{strings.Repeat("a", 100000), want, false},
		{"", want, false},
		{"", "", false},
		{"x", "", false},
	} {
		if ok := TokenEqual(tc.got, tc.want); ok != tc.ok {
			t.Errorf("TokenEqual(%d bytes, %d bytes) = %v, want %v", len(tc.got), len(tc.want), ok, tc.ok)
		}
	}
	for i, l := range lens {
		if l != [2]int{32, 32} {
			t.Errorf("comparison %d over %d and %d bytes, want two 32-byte digests", i, l[0], l[1])
		}
	}
	if len(lens) != 7 {
		t.Errorf("%d comparisons, want 7", len(lens))
	}
}
