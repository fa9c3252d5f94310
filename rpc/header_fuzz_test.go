package rpc

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/sidecar-dev/sidecar/delivery"
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
		`{"jsonrpc":"2.0","method":"channel/credit","params":{"channel":"ahp-terminal:/t1","consumedBytes":804}}`,
		`{"jsonrpc":"2.0","method":"channel/credit","params":{"channel":"c","consumedBytes":0}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		checkStreamData(t, raw)
		checkCredit(t, raw)
		fast, ok := parseHeaderFast(raw)
		if !ok {
			return
		}
		if fast.ASCII && delivery.Measure(raw) != delivery.UTF16Bytes(2*len(raw)) {
			t.Fatalf("%q: ASCII, but measures %d", raw, delivery.Measure(raw))
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

// checkStreamData checks parseStreamData against the slow path: when the params
// it found are valid JSON (which the TCP adapter checks before using
// them), the message is valid and the slow path finds the same header.
// (Params that are not valid JSON are refused by the adapter; that
// includes a message valid only because of top-level members after
// params, which no encoder writes.) Its size is 2 UTF-16 bytes a byte.
func checkStreamData(t *testing.T, raw []byte) {
	h, ok := parseStreamData(raw)
	if !ok {
		return
	}
	if !h.ParamsUnchecked || !h.ASCII || !h.IsNotification() {
		t.Fatalf("%q: %+v", raw, h)
	}
	if delivery.Measure(raw) != delivery.UTF16Bytes(2*len(raw)) {
		t.Fatalf("%q: measures %d, not 2 a byte", raw, delivery.Measure(raw))
	}
	if !json.Valid(h.Params) {
		return
	}
	slow, e := parseHeaderSlow(raw)
	if e != nil {
		t.Fatalf("%q: params valid, slow path: %v", raw, e)
	}
	if slow.Method != h.Method || slow.Channel != h.Channel || !bytes.Equal(slow.Params, h.Params) || slow.ID != nil {
		t.Fatalf("%q:\ntcp  %+v\nslow %+v", raw, h, slow)
	}
}

// checkCredit checks ParseCredit against encoding/json: whatever it
// accepts is valid ASCII JSON, the slow path finds the same header, and
// params decode to the same consumedBytes; parseCredit's header is
// parseHeaderFast's.
func checkCredit(t *testing.T, raw []byte) {
	ch, consumed, ok := ParseCredit(raw)
	if !ok {
		return
	}
	if !json.Valid(raw) || delivery.Measure(raw) != delivery.UTF16Bytes(2*len(raw)) {
		t.Fatalf("%q: accepted, but not valid ASCII JSON", raw)
	}
	slow, e := parseHeaderSlow(raw)
	if e != nil {
		t.Fatalf("%q: slow path: %v", raw, e)
	}
	var p ChannelCreditParams
	if e := DecodeParams(slow.Params, &p); e != nil || p.ConsumedBytes != consumed || p.Channel != string(ch) {
		t.Fatalf("%q: ParseCredit %q %d; DecodeParams %+v %v", raw, ch, consumed, p, e)
	}
	h, ok := parseCredit(raw)
	if !ok || !h.ASCII || !h.IsNotification() || h.ParamsUnchecked || cap(h.Params) != len(h.Params) {
		t.Fatalf("%q: parseCredit %v %+v", raw, ok, h)
	}
	if slow.Method != h.Method || slow.Channel != h.Channel || !bytes.Equal(slow.Params, h.Params) || slow.ID != nil {
		t.Fatalf("%q:\ncredit %+v\nslow   %+v", raw, h, slow)
	}
	if fast, ok := parseHeaderFast(raw); !ok || fast.Channel != h.Channel || !bytes.Equal(fast.Params, h.Params) || fast.ASCII != h.ASCII {
		t.Fatalf("%q: parseHeaderFast %v %+v, parseCredit %+v", raw, ok, fast, h)
	}
}

func TestParseCredit(t *testing.T) {
	for _, c := range []struct {
		raw      string
		ok       bool
		channel  string
		consumed delivery.UTF16Bytes
	}{
		{`{"jsonrpc":"2.0","method":"channel/credit","params":{"channel":"ahp-terminal:/t1","consumedBytes":804}}`, true, "ahp-terminal:/t1", 804},
		{`{"jsonrpc":"2.0","method":"channel/credit","params":{"channel":"c","consumedBytes":0}}`, true, "c", 0},
		{`{"jsonrpc":"2.0","method":"channel/credit","params":{"channel":"","consumedBytes":5}}`, true, "", 5},
		{`{"jsonrpc":"2.0","method":"channel/credit","params":{"channel":"c","consumedBytes":999999999999999999}}`, true, "c", 999999999999999999},
		// The rest is left to ParseHeader and DecodeParams.
		{`{"jsonrpc":"2.0","method":"channel/credit","params":{"channel":"c","consumedBytes":1000000000000000000}}`, false, "", 0},
		{`{"jsonrpc":"2.0","method":"channel/credit","params":{"channel":"c","consumedBytes":007}}`, false, "", 0},
		{`{"jsonrpc":"2.0","method":"channel/credit","params":{"channel":"c","consumedBytes":-4}}`, false, "", 0},
		{`{"jsonrpc":"2.0","method":"channel/credit","params":{"channel":"c","consumedBytes":4.5}}`, false, "", 0},
		{`{"jsonrpc":"2.0","method":"channel/credit","params":{"channel":"c","consumedBytes":4}} `, false, "", 0},
		{`{"jsonrpc":"2.0","method":"channel/credit","params":{"channel":"c","consumedBytes":4},"id":1}`, false, "", 0},
		{`{"jsonrpc":"2.0","method":"channel/credit","params":{"channel":"c","consumedBytes":4}`, false, "", 0},
		{`{"jsonrpc":"2.0","method":"channel/credit","params":{"channel":"c","consumedBytes":}}`, false, "", 0},
		{`{"jsonrpc":"2.0","method":"channel/credit","params":{"channel":"c\u0031","consumedBytes":4}}`, false, "", 0},
		{`{"jsonrpc":"2.0","method":"channel/credit","params":{"channel":"é","consumedBytes":4}}`, false, "", 0},
		{`{"jsonrpc":"2.0","method":"channel/credit","params":{"channel":"c` + "\t" + `","consumedBytes":4}}`, false, "", 0},
		{`{"jsonrpc":"2.0","method":"channel/credit","params":{"consumedBytes":4,"channel":"c"}}`, false, "", 0},
		{`{"jsonrpc":"2.0","method":"channel/credit","params":{"channel":"c","consumedBytes":"4"}}`, false, "", 0},
		{`{"jsonrpc":"2.0","method":"channel/credit","params":{"channel":"c"`, false, "", 0},
	} {
		ch, consumed, ok := ParseCredit([]byte(c.raw))
		if ok != c.ok || ok && (string(ch) != c.channel || consumed != c.consumed) {
			t.Errorf("%s: ParseCredit %q %d %v", c.raw, ch, consumed, ok)
		}
		if _, hok := parseCredit([]byte(c.raw)); hok != ok {
			t.Errorf("%s: parseCredit %v, ParseCredit %v", c.raw, hok, ok)
		}
		checkCredit(t, []byte(c.raw))
	}
	// AppendCredit's output is what the fast path takes, without
	// allocating.
	raw := delivery.AppendCredit(nil, "ahp-tcp:/x", 123456)
	if ch, n, ok := ParseCredit(raw); !ok || string(ch) != "ahp-tcp:/x" || n != 123456 {
		t.Fatalf("%s: ParseCredit %q %d %v", raw, ch, n, ok)
	}
	if n := testing.AllocsPerRun(100, func() { _, _, _ = ParseCredit(raw) }); n != 0 {
		t.Errorf("ParseCredit: %v allocations, want 0", n)
	}
}

func TestParseStreamData(t *testing.T) {
	for _, c := range []struct {
		raw     string
		ok      bool
		channel string
	}{
		{`{"jsonrpc":"2.0","method":"tcp/data","params":{"channel":"ahp-tcp:/t1","offset":5,"data":"SGVsbG8="}}`, true, "ahp-tcp:/t1"},
		{`{"jsonrpc":"2.0","method":"tcp/data","params":{"channel":"ahp-tcp:/t\u0031","data":"SGVsbG8="}}`, false, ""},
		{`{"jsonrpc":"2.0","method":"tcp/data","params":{"channel":"ahp-tcp:/é","data":"SGVsbG8="}}`, false, ""},
		{`{"jsonrpc":"2.0","method":"tcp/data","params":{"channel":"c","data":"QQ=="}} `, false, ""},
		{`{"jsonrpc":"2.0","method":"tcp/data","params":{"channel":"c","data":"QQ=="},"id":{}}`, true, "c"}, // params invalid: the adapter refuses
		{`{"jsonrpc":"2.0","method":"tcp/eof","params":{"channel":"c"}}`, false, ""},
	} {
		h, ok := parseStreamData([]byte(c.raw))
		if ok != c.ok || ok && h.Channel != c.channel {
			t.Errorf("%s: ok %v %+v", c.raw, ok, h)
		}
		checkStreamData(t, []byte(c.raw))
	}
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
