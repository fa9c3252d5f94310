package rpc

import (
	"runtime"
	"strings"
	"testing"
)

// nested returns n '[' followed by n ']' (closed) or not.
func nested(n int, closed bool) string {
	s := strings.Repeat("[", n)
	if closed {
		s += strings.Repeat("]", n)
	}
	return s
}

// TestParseHeaderBounds: what ParseHeader refuses of hostile input, with
// the exact code and message, and the id it keeps for the answer (only a
// valid one; "" is "id":null).
func TestParseHeaderBounds(t *testing.T) {
	deep := `invalid request: nested deeper than 128 levels`
	badID := `invalid request: id must be a string or an integer from 0 to 18446744073709551615`
	tests := []struct {
		name   string
		raw    string
		code   int64
		msg    string
		keptID string
	}{
		{"1,048,000 nested [", nested(1048000, false), CodeInvalidRequest, deep, ""},
		{"100,000 levels in params", `{"jsonrpc":"2.0","id":8,"method":"ping","params":` + nested(100000, true) + `}`, CodeInvalidRequest, deep, "8"},
		{"deep params unclosed", `{"jsonrpc":"2.0","id":"x","method":"ping","params":` + nested(100000, false), CodeInvalidRequest, deep, `"x"`},
		{"id after the deep params", `{"jsonrpc":"2.0","method":"ping","params":` + nested(200, true) + `,"id":9}`, CodeInvalidRequest, deep, "9"},
		{"id after unclosed deep params", `{"jsonrpc":"2.0","method":"ping","params":` + nested(200, false) + `,"id":9}`, CodeInvalidRequest, deep, ""},
		{"deep with an id beyond uint64", `{"id":18446744073709551616,"params":` + nested(200, true) + `}`, CodeInvalidRequest, deep, ""},
		{"depth 129", `{"jsonrpc":"2.0","id":1,"method":"ping","params":` + nested(128, true) + `}`, CodeInvalidRequest, deep, "1"},
		{"id beyond uint64", `{"jsonrpc":"2.0","id":18446744073709551616,"method":"ping"}`, CodeInvalidRequest, badID, ""},
		{"id of 30 digits", `{"jsonrpc":"2.0","id":100000000000000000000000000000,"method":"ping"}`, CodeInvalidRequest, badID, ""},
		{"id with exponent", `{"jsonrpc":"2.0","id":1e3,"method":"ping"}`, CodeInvalidRequest, badID, ""},
		{"Method is not method", `{"jsonrpc":"2.0","id":7,"Method":"ping"}`, CodeInvalidRequest, "invalid request: no method", "7"},
		{"METHOD", `{"jsonrpc":"2.0","id":7,"METHOD":"ping"}`, CodeInvalidRequest, "invalid request: no method", "7"},
		{"Jsonrpc is not jsonrpc", `{"Jsonrpc":"2.0","id":3,"method":"ping"}`, CodeInvalidRequest, `invalid request: "jsonrpc" must be "2.0"`, "3"},
		{"request with id null", `{"jsonrpc":"2.0","id":null,"method":"ping"}`, CodeInvalidRequest, "invalid request: id must be a string or an integer from 0 to 18446744073709551615, not null (leave the id out for a notification)", "null"},
		{"id null after the method", `{"method":"unsubscribe","params":{"channel":"c"},"jsonrpc":"2.0","id":null}`, CodeInvalidRequest, "invalid request: id must be a string or an integer from 0 to 18446744073709551615, not null (leave the id out for a notification)", "null"},
		{"top-level null", `null`, CodeInvalidRequest, "invalid request: a message of the wrong type (null): it must be a JSON object", ""},
		{"top-level number", `5`, CodeInvalidRequest, "invalid request: a message of the wrong type (number): it must be a JSON object", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, e := ParseHeader([]byte(tc.raw))
			if e == nil {
				t.Fatalf("accepted: id %q method %q", h.ID, h.Method)
			}
			if e.Code != tc.code || e.Message != tc.msg {
				t.Fatalf("error %d %q, want %d %q", e.Code, e.Message, tc.code, tc.msg)
			}
			if string(h.ID) != tc.keptID {
				t.Fatalf("kept id %q, want %q", h.ID, tc.keptID)
			}
		})
	}
}

// TestParseHeaderWithinBounds: what is at the bounds is accepted.
func TestParseHeaderWithinBounds(t *testing.T) {
	for _, tc := range []struct{ name, raw, id string }{
		{"depth 128", `{"jsonrpc":"2.0","id":1,"method":"ping","params":` + nested(127, true) + `}`, "1"},
		{"brackets in strings do not count", `{"jsonrpc":"2.0","id":2,"method":"ping","params":{"s":"` + nested(1000, false) + `"}}`, "2"},
		{"escaped quotes in strings", `{"jsonrpc":"2.0","id":3,"method":"ping","params":{"s":"\"` + nested(1000, false) + `\\\"\\\\"}}`, "3"},
		{"id 2^64-1", `{"jsonrpc":"2.0","id":18446744073709551615,"method":"ping"}`, "18446744073709551615"},
		{"id 0", `{"jsonrpc":"2.0","id":0,"method":"ping"}`, "0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, e := ParseHeader([]byte(tc.raw))
			if e != nil {
				t.Fatalf("refused: %v", e)
			}
			if string(h.ID) != tc.id || h.Method != "ping" {
				t.Fatalf("id %q method %q, want %q ping", h.ID, h.Method, tc.id)
			}
		})
	}
}

// TestParseHeaderDeepMemory: a 1 MiB message of nested '[' (or one that
// nests that deep inside params) costs memory in proportion to its size,
// not to its depth: nothing recursive sees it. Both the heap allocated
// and the stack the goroutine grew are measured, the latter being what a
// recursive validator used (about 125 MB for this message).
func TestParseHeaderDeepMemory(t *testing.T) {
	for _, raw := range []string{
		nested(1048000, false),
		`{"jsonrpc":"2.0","id":1,"method":"ping","params":` + nested(500000, true) + `}`,
	} {
		b := []byte(raw)
		done := make(chan [2]uint64)
		go func() {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, e := ParseHeader(b)
			runtime.ReadMemStats(&after)
			if e == nil || e.Code != CodeInvalidRequest {
				t.Errorf("ParseHeader: %v, want -32600", e)
			}
			// StackInuse is the process's: another goroutine's stack may
			// shrink meanwhile, so a fall counts as no growth.
			var grew uint64
			if after.StackInuse > before.StackInuse {
				grew = after.StackInuse - before.StackInuse
			}
			done <- [2]uint64{after.TotalAlloc - before.TotalAlloc, grew}
		}()
		got := <-done
		heap, stack := got[0], got[1]
		if limit := uint64(len(b))/8 + 4096; heap > limit {
			t.Errorf("%d-byte message: %d bytes allocated, want at most %d", len(b), heap, limit)
		}
		if stack > 256<<10 {
			t.Errorf("%d-byte message: stack grew by %d bytes, want at most 256 KiB", len(b), stack)
		}
		allocs := testing.AllocsPerRun(10, func() { _, _ = ParseHeader(b) })
		if allocs > 4 {
			t.Errorf("%d-byte message: %.0f allocations, want at most 4", len(b), allocs)
		}
	}
}

func TestCheckClientID(t *testing.T) {
	for _, c := range []struct {
		id   string
		want string // "" for accepted
	}{
		{"c1", ""},
		{strings.Repeat("a", MaxClientIDBytes), ""},
		{"", `invalid params: "clientId" is required`},
		{strings.Repeat("a", MaxClientIDBytes+1), `invalid params: "clientId" must be 1-256 bytes without control characters (got 257 bytes)`},
		{strings.Repeat("a", 1000000), `invalid params: "clientId" must be 1-256 bytes without control characters (got 1000000 bytes)`},
		{"a\nb", `invalid params: "clientId" must be 1-256 bytes without control characters (got 3 bytes)`},
		{"a\x7f", `invalid params: "clientId" must be 1-256 bytes without control characters (got 2 bytes)`},
	} {
		e := CheckClientID("clientId", c.id)
		switch {
		case c.want == "" && e != nil:
			t.Errorf("%.20q: %v, want accepted", c.id, e)
		case c.want != "" && (e == nil || e.Code != CodeInvalidParams || e.Message != c.want):
			t.Errorf("%.20q: %v, want -32602 %q", c.id, e, c.want)
		}
	}
}
