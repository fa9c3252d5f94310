package rpc

import (
	"bytes"
	"testing"
)

// FuzzParseHeader checks the fast path against encoding/json: whenever
// parseHeaderFast accepts a message, the slow path accepts it too and
// finds the same routing header.
func FuzzParseHeader(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"ping","params":{"channel":"ahp-root://"}}`,
		`{"jsonrpc":"2.0","method":"tcp/data","params":{"channel":"ahp-tcp:/t1","offset":5,"data":"SGVsbG8="}}`,
		`{"id":2,"result":null,"jsonrpc":"2.0"}`,
		`{"jsonrpc":"2.0","id":"x","error":{"code":-32601,"message":"m"}}`,
		`{"jsonrpc":"2.0","method":"a\u0062","params":{"x":[1,{"channel":"no"}],"channel":"c\n"}}`,
		`{"jsonrpc":"2.0","id":null,"method":"n","params":[1,2]}`,
		`{"jsonrpc":"2.0","id":1.5,"method":"ping"}`,
		`[{"jsonrpc":"2.0"}]`,
		` {"jsonrpc":"2.0","method":"m"} `,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		fast, ok := parseHeaderFast(raw)
		if !ok {
			return
		}
		slow, e := parseHeaderSlow(raw)
		if e != nil {
			t.Fatalf("fast path accepted %q, slow path: %v", raw, e)
		}
		if fast.Method != slow.Method || fast.Channel != slow.Channel || fast.JSONRPC != slow.JSONRPC ||
			!bytes.Equal(fast.ID, slow.ID) || !bytes.Equal(fast.Params, slow.Params) ||
			!bytes.Equal(fast.Result, slow.Result) || !bytes.Equal(fast.Error, slow.Error) {
			t.Fatalf("%q:\nfast %+v\nslow %+v", raw, fast, slow)
		}
	})
}

func BenchmarkParseHeader(b *testing.B) {
	msg := []byte(`{"jsonrpc":"2.0","method":"tcp/data","params":{"channel":"ahp-tcp:/t1","offset":123456,"data":"` +
		string(bytes.Repeat([]byte("QUJDREVGR0g="), 700)) + `"}}`)
	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	for b.Loop() {
		if _, e := ParseHeader(msg); e != nil {
			b.Fatal(e)
		}
	}
}
