package rpc

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sidecar-dev/sidecar/delivery"
)

func TestMarshalDoesNotEscapeHTML(t *testing.T) {
	got, err := Marshal(map[string]string{"data": "<b>&</b>"})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"data":"<b>&</b>"}`
	if string(got) != want {
		t.Fatalf("Marshal = %q, want %q (no HTML escaping, no trailing newline)", got, want)
	}
	// The encoded text is what is measured: '<' is one code unit, not six.
	if n := delivery.Measure(got); n != delivery.UTF16Bytes(2*len([]rune(want))) {
		t.Fatalf("Measure = %d, want %d", n, 2*len([]rune(want)))
	}
	// Unlike JSON.stringify (and delivery.AppendJSONString), encoding/json
	// still escapes U+2028 and U+2029. Sizes stay consistent because both
	// peers measure the text as sent, but the package doc's "as
	// JSON.stringify would" does not hold for these two characters.
	got, err = Marshal("\u2028")
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != `"\u2028"` {
		t.Fatalf("Marshal(U+2028) = %q", got)
	}
}

func TestNotificationAndRequestExactText(t *testing.T) {
	n, err := Notification(MethodChannelGap, ChannelGapParams{Channel: "c", AfterSeq: 7})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"jsonrpc":"2.0","method":"channel/gap","params":{"channel":"c","afterSeq":7}}`; string(n) != want {
		t.Fatalf("Notification = %s, want %s", n, want)
	}
	r, err := Request(3, MethodPing, ChannelParams{Channel: RootChannel})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"jsonrpc":"2.0","id":3,"method":"ping","params":{"channel":"ahp-root://"}}`; string(r) != want {
		t.Fatalf("Request = %s, want %s", r, want)
	}
}

func TestParseHeaderErrors(t *testing.T) {
	tests := []struct {
		name   string
		raw    string
		code   int64
		msg    string // substring of the message
		keptID string // header ID returned with the error
	}{
		{"malformed JSON", `{"jsonrpc":"2.0",`, CodeParseError, "parse error", ""},
		{"empty input", ``, CodeParseError, "parse error", ""},
		{"not JSON at all", `hello`, CodeParseError, "parse error", ""},
		{"batch", `[{"jsonrpc":"2.0","id":1,"method":"ping"}]`, CodeInvalidRequest, "batch", ""},
		{"batch after white space", " \r\n\t[]", CodeInvalidRequest, "batch", ""},
		{"jsonrpc 1.0", `{"jsonrpc":"1.0","id":1,"method":"ping"}`, CodeInvalidRequest, `"jsonrpc" must be "2.0"`, "1"},
		{"jsonrpc missing", `{"id":2,"method":"ping"}`, CodeInvalidRequest, `"jsonrpc" must be "2.0"`, "2"},
		{"id 1.5", `{"jsonrpc":"2.0","id":1.5,"method":"ping"}`, CodeInvalidRequest, "id must be", ""},
		{"id negative", `{"jsonrpc":"2.0","id":-1,"method":"ping"}`, CodeInvalidRequest, "id must be", ""},
		{"id bool", `{"jsonrpc":"2.0","id":true,"method":"ping"}`, CodeInvalidRequest, "id must be", ""},
		{"id object", `{"jsonrpc":"2.0","id":{},"method":"ping"}`, CodeInvalidRequest, "id must be", ""},
		{"no method", `{"jsonrpc":"2.0","id":4}`, CodeInvalidRequest, "no method", "4"},
		{"method not a string", `{"jsonrpc":"2.0","id":5,"method":5}`, CodeInvalidRequest, `field "method" has the wrong type`, "5"},
		{"top-level string", `"ping"`, CodeInvalidRequest, "wrong type", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, e := ParseHeader([]byte(tc.raw))
			if e == nil {
				t.Fatalf("ParseHeader(%s) succeeded: %+v", tc.raw, h)
			}
			if e.Code != tc.code {
				t.Fatalf("code = %d, want %d (message %q)", e.Code, tc.code, e.Message)
			}
			if !strings.Contains(e.Message, tc.msg) {
				t.Fatalf("message %q does not contain %q", e.Message, tc.msg)
			}
			if h == nil {
				t.Fatal("header is nil; callers read h.ID for the error response")
			}
			if string(h.ID) != tc.keptID {
				t.Fatalf("header ID = %q, want %q", h.ID, tc.keptID)
			}
		})
	}
}

func TestParseHeaderClassifies(t *testing.T) {
	tests := []struct {
		name                     string
		raw                      string
		request, notif, response bool
		channel                  string
	}{
		{"request", `{"jsonrpc":"2.0","id":1,"method":"subscribe","params":{"channel":"ahp-terminal:/t"}}`, true, false, false, "ahp-terminal:/t"},
		{"request with string id", `{"jsonrpc":"2.0","id":"a","method":"ping"}`, true, false, false, ""},
		{"request with id 0", `{"jsonrpc":"2.0","id":0,"method":"ping"}`, true, false, false, ""},
		{"notification", `{"jsonrpc":"2.0","method":"channel/credit","params":{"channel":"c","consumedBytes":5}}`, false, true, false, "c"},
		{"response result", `{"jsonrpc":"2.0","id":1,"result":{}}`, false, false, true, ""},
		{"response result null", `{"jsonrpc":"2.0","id":1,"result":null}`, false, false, true, ""},
		{"response error", `{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"x"}}`, false, false, true, ""},
		{"channel not a string", `{"jsonrpc":"2.0","method":"x","params":{"channel":5}}`, false, true, false, ""},
		{"params array", `{"jsonrpc":"2.0","method":"x","params":["ahp-root://"]}`, false, true, false, ""},
		{"params without channel", `{"jsonrpc":"2.0","method":"x","params":{"other":"c"}}`, false, true, false, ""},
		{"params with _meta and escaped channel", `{"jsonrpc":"2.0","method":"x","params":{"_meta":{},"channel":"a\u002fb"}}`, false, true, false, "a/b"},
		{"leading white space", " \n{\"jsonrpc\":\"2.0\",\"method\":\"x\",\"params\":{\"channel\":\"c\"}}", false, true, false, "c"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, e := ParseHeader([]byte(tc.raw))
			if e != nil {
				t.Fatalf("ParseHeader: %v", e)
			}
			if h.IsRequest() != tc.request || h.IsNotification() != tc.notif || h.IsResponse() != tc.response {
				t.Fatalf("request/notification/response = %v/%v/%v, want %v/%v/%v",
					h.IsRequest(), h.IsNotification(), h.IsResponse(), tc.request, tc.notif, tc.response)
			}
			if h.Channel != tc.channel {
				t.Fatalf("Channel = %q, want %q", h.Channel, tc.channel)
			}
		})
	}
}

func TestDecodeParams(t *testing.T) {
	tests := []struct {
		name   string
		params string
		into   func() any
		want   string // exact message; "" means success
	}{
		{"ok", `{"channel":"c"}`, func() any { return &ChannelParams{} }, ""},
		{"unknown keys ignored", `{"channel":"c","_meta":{"x":1},"extra":true}`, func() any { return &ChannelParams{} }, ""},
		{"channel wrong type", `{"channel":5}`, func() any { return &ChannelParams{} }, `invalid params: "channel" must be a string`},
		{"number wrong type", `{"channel":"c","consumedBytes":"7"}`, func() any { return &ChannelCreditParams{} }, `invalid params: "consumedBytes" must be an integer`},
		{"array wrong type", `{"channel":"c","protocolVersions":"0.5.0","clientId":"x"}`, func() any { return &InitializeParams{} }, `invalid params: "protocolVersions" must be an array`},
		{"unsigned below zero", `{"channel":"c","afterSeq":-1}`, func() any { return &ChannelPageParams{} }, `invalid params: "afterSeq" must be an integer from 0 to 18446744073709551615`},
		{"unsigned too large", `{"channel":"c","afterSeq":1e30}`, func() any { return &ChannelPageParams{} }, `invalid params: "afterSeq" must be an integer from 0 to 18446744073709551615`},
		{"nested field named by path", `{"channel":"c","flowControl":{"receive":{"windowBytes":"big"}}}`, func() any { return &SubscribeParams{} }, `invalid params: "flowControl.receive.windowBytes" must be an integer`},
		{"object wrong type", `{"channel":"c","claim":"me"}`, func() any { return &CreateTerminalParams{} }, `invalid params: "claim" must be an object`},
		{"missing params", ``, func() any { return &ChannelParams{} }, `invalid params: params object required`},
		{"null params", `null`, func() any { return &ChannelParams{} }, `invalid params: params object required`},
		{"params an array", `["c"]`, func() any { return &ChannelParams{} }, `invalid params: params must be an object`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := DecodeParams(json.RawMessage(tc.params), tc.into())
			if tc.want == "" {
				if e != nil {
					t.Fatalf("DecodeParams: %v", e)
				}
				return
			}
			if e == nil {
				t.Fatalf("DecodeParams(%s) succeeded, want %q", tc.params, tc.want)
			}
			if e.Code != CodeInvalidParams || e.Message != tc.want {
				t.Fatalf("DecodeParams = %d %q, want %d %q", e.Code, e.Message, CodeInvalidParams, tc.want)
			}
		})
	}
	var p ChannelParams
	if e := DecodeParams(json.RawMessage(`{"channel":"ahp-root://"}`), &p); e != nil || p.Channel != RootChannel {
		t.Fatalf("decoded %+v, %v", p, e)
	}
	if m := Missing("clientId"); m.Code != CodeInvalidParams || m.Message != `invalid params: "clientId" is required` {
		t.Fatalf("Missing = %d %q", m.Code, m.Message)
	}
}

func TestErrorResponse(t *testing.T) {
	tests := []struct {
		name string
		id   json.RawMessage
		e    *Error
		want string
	}{
		{"nil id", nil, &Error{Code: CodeParseError, Message: "parse error: x"},
			`{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error: x"}}`},
		{"empty id", json.RawMessage{}, &Error{Code: CodeInvalidRequest, Message: "m"},
			`{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"m"}}`},
		{"numeric id", json.RawMessage(`7`), &Error{Code: CodeNotFound, Message: "no such channel: <x>"},
			`{"jsonrpc":"2.0","id":7,"error":{"code":-32008,"message":"no such channel: <x>"}}`},
		{"string id with data", json.RawMessage(`"a"`), &Error{Code: CodeUnsupportedProtocolVersion, Message: "v", Data: json.RawMessage(`{"supportedVersions":["^0.5.0"]}`)},
			`{"jsonrpc":"2.0","id":"a","error":{"code":-32005,"message":"v","data":{"supportedVersions":["^0.5.0"]}}}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(ErrorResponse(tc.id, tc.e)); got != tc.want {
				t.Fatalf("ErrorResponse =\n %s\nwant\n %s", got, tc.want)
			}
		})
	}
	// An error response for a header ParseHeader rejected names its id.
	h, e := ParseHeader([]byte(`{"jsonrpc":"2.0","id":9}`))
	if got, want := string(ErrorResponse(h.ID, e)), `{"jsonrpc":"2.0","id":9,"error":{"code":-32600,"message":"invalid request: no method"}}`; got != want {
		t.Fatalf("ErrorResponse(no method) = %s, want %s", got, want)
	}
	if got := Errorf(CodeNotFound, "no such terminal: %s", "t").Error(); got != "no such terminal: t (code -32008)" {
		t.Fatalf("Error() = %q", got)
	}
}

func TestCodes(t *testing.T) {
	for _, c := range []struct {
		got, want int64
	}{
		{CodeParseError, -32700}, {CodeInvalidRequest, -32600}, {CodeMethodNotFound, -32601},
		{CodeInvalidParams, -32602}, {CodeInternalError, -32603}, {CodeUnsupportedProtocolVersion, -32005},
		{CodeNotFound, -32008}, {CodePermissionDenied, -32009}, {CodeAlreadyExists, -32010},
		{CodeTCPConnectionOpenFailed, -32012}, {CodeOverloaded, -32050}, {CodeNotInitialized, -32600},
	} {
		if c.got != c.want {
			t.Errorf("code %d, want %d", c.got, c.want)
		}
	}
}

// appendString writes plain ASCII itself and leaves the rest to Marshal:
// either way the text is Marshal's.
func TestAppendStringMatchesMarshal(t *testing.T) {
	for _, s := range []string{"", "ahp-terminal:/t1", "ahp-root://", "a b~", "<&>", "\x7f", `q"`, `b\`, "\n", "\x00", "é", "\u2028", "\xff", "😀"} {
		want, _ := Marshal(s)
		if got := appendString([]byte("x"), s); string(got) != "x"+string(want) {
			t.Errorf("appendString(%q) = %s, want x%s", s, got, want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _ = AppendActionEnvelope(make([]byte, 0, 256), "ahp-terminal:/t1", []byte(`{}`), 7) }); n > 1 {
		t.Errorf("AppendActionEnvelope: %v allocations, want only the buffer", n)
	}
}

func TestActionEnvelopeInPieces(t *testing.T) {
	whole := AppendActionEnvelope(nil, "ahp-terminal:/t1", []byte(`{"type":"terminal/data","data":"x"}`), 42)
	b := AppendActionOpen(nil, "ahp-terminal:/t1")
	b = append(b, `{"type":"terminal/data","data":"x"}`...)
	b = append(b, ActionSeqMember...)
	b = append(b, "42"...)
	b = append(b, ActionEnvelopeEnd...)
	if string(b) != string(whole) {
		t.Fatalf("pieces %s, whole %s", b, whole)
	}
	want, _ := Notification(MethodAction, ActionEnvelope{Channel: "ahp-terminal:/t1", Action: []byte(`{"type":"terminal/data","data":"x"}`), ServerSeq: 42})
	if string(whole) != string(want) {
		t.Fatalf("AppendActionEnvelope %s, Notification %s", whole, want)
	}
}

// TestErrorfBounded: an error message quoting peer input is cut at a
// character boundary to at most MaxErrorMessageBytes, the "…(N bytes)"
// suffix with the length it had included (it came on top: up to 529
// bytes).
func TestErrorfBounded(t *testing.T) {
	if got := Errorf(CodeNotFound, "no such channel: %s", "ahp-terminal:/t1").Message; got != "no such channel: ahp-terminal:/t1" {
		t.Fatalf("short message changed: %q", got)
	}
	exact := strings.Repeat("x", MaxErrorMessageBytes)
	if got := Errorf(CodeNotFound, "%s", exact).Message; got != exact {
		t.Fatalf("a message of exactly %d bytes was changed to %d bytes", MaxErrorMessageBytes, len(got))
	}
	for _, c := range []struct {
		char  string
		total int // bytes of the formatted message
	}{
		{"é", 100_000},       // 2-byte characters: a cut may fall inside one
		{"日", 3 * 1_000_000}, // 3-byte characters, a 7-digit length
		{"x", MaxErrorMessageBytes + 1},
	} {
		uri := "ahp-terminal:/" + strings.Repeat(c.char, (c.total-len("no such channel: ahp-terminal:/"))/len(c.char))
		e := Errorf(CodeNotFound, "no such channel: %s", uri)
		whole := "no such channel: " + uri
		total := len(whole)
		suffix := "…(" + strconv.Itoa(total) + " bytes)"
		if !strings.HasSuffix(e.Message, suffix) {
			t.Fatalf("message ends %q, want the suffix %q", e.Message[max(0, len(e.Message)-40):], suffix)
		}
		body := strings.TrimSuffix(e.Message, suffix)
		if len(e.Message) > MaxErrorMessageBytes || len(e.Message) <= MaxErrorMessageBytes-len(c.char) ||
			!utf8.ValidString(body) || !strings.HasPrefix(whole, body) {
			t.Fatalf("%q×%d: message of %d bytes (body valid UTF-8 %v), want at most %d and more than %d, cut at a character",
				c.char, total, len(e.Message), utf8.ValidString(body), MaxErrorMessageBytes, MaxErrorMessageBytes-len(c.char))
		}
	}
}
