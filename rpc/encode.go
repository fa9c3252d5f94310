package rpc

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
	"unsafe"

	"github.com/tidwall/gjson"

	"github.com/sidecar-dev/sidecar/delivery"
)

// Marshal encodes v as compact JSON without HTML escaping (so terminal
// output keeps '<', '>' and '&' as one code unit each, as JSON.stringify
// would; encoding/json still escapes U+2028 and U+2029). The result is the
// exact text sent; sizes are measured on it. Values with their own
// MarshalJSON (jsonrpc2's responses) may still HTML-escape inside.
func Marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	return b[:len(b)-1], nil // Encode appends '\n'
}

// AppendActionEnvelope appends the action notification
// {"jsonrpc":"2.0","method":"action","params":{"channel":C,"action":A,"serverSeq":N}}
// where action is already-encoded compact JSON (taken as is). The same
// text rpc.Notification gives for an ActionEnvelope without origin.
func AppendActionEnvelope(dst []byte, channel string, action []byte, seq uint64) []byte {
	dst = AppendActionOpen(dst, channel)
	dst = append(dst, action...)
	dst = append(dst, ActionSeqMember...)
	dst = strconv.AppendUint(dst, seq, 10)
	return append(dst, ActionEnvelopeEnd...)
}

// The action envelope in pieces, for encoders that write the action in
// place and learn the serverSeq last (journal.AppendSeq): AppendActionOpen,
// the action's JSON, ActionSeqMember, the serverSeq, ActionEnvelopeEnd is
// exactly AppendActionEnvelope.
const (
	ActionSeqMember   = `,"serverSeq":`
	ActionEnvelopeEnd = "}}"
)

// AppendActionOpen appends the envelope up to its action:
// {"jsonrpc":"2.0","method":"action","params":{"channel":C,"action":
func AppendActionOpen(dst []byte, channel string) []byte {
	dst = append(dst, `{"jsonrpc":"2.0","method":"action","params":{"channel":`...)
	dst = appendString(dst, channel)
	return append(dst, `,"action":`...)
}

// appendString appends s as a JSON string the way Marshal does. A string
// of printable ASCII without '"' or '\\' (every channel URI in practice)
// is written as is, without allocating; anything else goes through
// Marshal, so its escaping stays encoding/json's.
func appendString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' {
			b, _ := Marshal(s)
			return append(dst, b...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}

// notification is the wire form of a JSON-RPC notification.
type notification struct {
	JSONRPC string `json:"jsonrpc"`
	Method  string `json:"method"`
	Params  any    `json:"params"`
}

// Notification encodes {"jsonrpc":"2.0","method":method,"params":params}.
func Notification(method string, params any) ([]byte, error) {
	return Marshal(notification{JSONRPC: "2.0", Method: method, Params: params})
}

// request is the wire form of a JSON-RPC request.
type request struct {
	JSONRPC string `json:"jsonrpc"`
	ID      uint64 `json:"id"`
	Method  string `json:"method"`
	Params  any    `json:"params"`
}

// Request encodes a request with a numeric id (AHP ids are numbers).
func Request(id uint64, method string, params any) ([]byte, error) {
	return Marshal(request{JSONRPC: "2.0", ID: id, Method: method, Params: params})
}

// Error is a JSON-RPC error object.
type Error struct {
	Code    int64           `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

func (e *Error) Error() string { return fmt.Sprintf("%s (code %d)", e.Message, e.Code) }

// MaxErrorMessageBytes bounds an error's message (UTF-8 bytes): messages
// quote the peer's input (a channel URI, a method name), and an answer
// must not grow with it.
const MaxErrorMessageBytes = 512

// Errorf returns an *Error with code and a formatted message of at most
// MaxErrorMessageBytes: a longer one is cut at a character boundary and
// ends with "…(N bytes)", the length it had, within the bound.
func Errorf(code int64, format string, args ...any) *Error {
	msg := fmt.Sprintf(format, args...)
	if len(msg) > MaxErrorMessageBytes {
		suffix := "…(" + strconv.Itoa(len(msg)) + " bytes)"
		cut := MaxErrorMessageBytes - len(suffix)
		for cut > 0 && !utf8.RuneStart(msg[cut]) {
			cut--
		}
		msg = msg[:cut] + suffix
	}
	return &Error{Code: code, Message: msg}
}

// ErrorResponse encodes an error response for id (raw JSON of the request
// id, or nil for "id":null as JSON-RPC requires when the id is unknown).
func ErrorResponse(id json.RawMessage, e *Error) []byte {
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	b, err := Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   *Error          `json:"error"`
	}{"2.0", id, e})
	if err != nil { // cannot happen: every field is plain data
		panic(err)
	}
	return b
}

// Header is the routing part of any JSON-RPC message, decoded once by the
// reader (golibs.md §3: classify before jsonrpc2 sees anything).
type Header struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params"`
	Result  json.RawMessage `json:"result"`
	Error   json.RawMessage `json:"error"`
	// Channel is params.channel when params is an object carrying it.
	Channel string `json:"-"`
	// ASCII reports that the whole message text is ASCII, so that its size
	// is 2 UTF-16 bytes per byte (seed 000 "Message Size") without
	// measuring it again.
	ASCII bool `json:"-"`
	// ParamsUnchecked reports that Params was not validated as JSON:
	// ParseHeader recognized a byte-stream data notification
	// (BinaryDataMethod) by its exact prefix (see parseStreamData) and left
	// its params to the byte-stream codec (delivery/bytestream), whose
	// parser checks them in full before using any of it.
	ParamsUnchecked bool `json:"-"`
	// Binary is set on a data notification that arrived in its binary
	// form (EventBinaryData: an EMIT on transport-io, a binary message on
	// /ahp) rather than as text: Params is nil, and the text it stands for
	// was never built. Whoever takes the message reads Binary instead.
	Binary *BinaryData `json:"-"`
}

// Size returns the size of the message h was parsed from, raw, in UTF-16
// bytes (seed 000 "Message Size"): for one that came in binary form the
// size of the text it stands for (BinaryData.Size), else of raw, measured
// only when it is not all ASCII.
func (h *Header) Size(raw []byte) delivery.UTF16Bytes {
	switch {
	case h.Binary != nil:
		return h.Binary.Size
	case h.ASCII:
		return delivery.UTF16Bytes(2 * len(raw))
	default:
		return delivery.Measure(raw)
	}
}

// BinaryData is a byte-stream data notification (BinaryDataMethod)
// received in its binary form: the offset and stream bytes that its text
//
//	{"jsonrpc":"2.0","method":"tcp/data","params":{"channel":"C","offset":Offset,"data":"BASE64"}}
//
// carries (docs/protocol.md "transport-io"), and that text's length, which
// windows and counters use as if the text had arrived (seed 000 "Message
// Size": the UTF-16 bytes of the text, whichever form carried it).
// delivery/bytestream parses it (ParseBinary).
type BinaryData struct {
	// Offset is the decoded-byte offset of Data's first byte.
	Offset uint64
	// Data is the stream bytes (decoded, at least one), a view of the
	// buffer the message was read into.
	Data []byte
	// TextLen is the text's length in UTF-8 bytes, Size in UTF-16 bytes.
	TextLen int
	Size    delivery.UTF16Bytes
}

// ParseNotification parses a reassembled data message (delivery.Accept's
// parse): its header and channel, ok when it is a notification.
func ParseNotification(text []byte) (h *Header, channel string, ok bool) {
	h, e := ParseHeader(text)
	if e != nil || !h.IsNotification() {
		return h, "", false
	}
	return h, h.Channel, true
}

// Fragment returns the params of h when it is a channel/frame, nil for
// any other data message; a channel/frame whose params do not decode is a
// BadFragment violation of channel's subscription.
func Fragment(h *Header, channel string) (*delivery.Fragment, error) {
	if h.Method != MethodChannelFrame {
		return nil, nil
	}
	var f delivery.Fragment
	if DecodeParams(h.Params, &f) != nil {
		return nil, &delivery.ViolationError{Kind: delivery.BadFragment, Channel: channel}
	}
	return &f, nil
}

// IsNotification reports whether the message is a notification: a method
// without an id (ParseHeader refuses a request with "id":null).
func (h *Header) IsNotification() bool {
	return h.Method != "" && len(h.ID) == 0
}

// IsRequest reports whether the message is a request.
func (h *Header) IsRequest() bool { return h.Method != "" && !h.IsNotification() }

// IsResponse reports whether the message is a response.
func (h *Header) IsResponse() bool { return h.Method == "" && (h.Result != nil || h.Error != nil) }

// ErrBatch is returned by ParseHeader for a JSON array (batches are not
// part of AHP).
var ErrBatch = errors.New("rpc: batch requests are not supported")

// ParseHeader decodes the routing header of one message. A *Error with
// CodeParseError or CodeInvalidRequest describes what is wrong; its
// returned Header still carries the id when it could be read, so the error
// response can name it.
func ParseHeader(raw []byte) (*Header, *Error) {
	if h, ok := parseStreamData(raw); ok {
		return h, nil
	}
	if h, ok := parseCredit(raw); ok {
		return h, nil
	}
	// Both paths below parse recursively (gjson, encoding/json): bound
	// the nesting first, in one linear scan.
	if !depthWithin(raw, MaxDepth) {
		return &Header{ID: topLevelID(raw)}, Errorf(CodeInvalidRequest, "invalid request: nested deeper than %d levels", MaxDepth)
	}
	if h, ok := parseHeaderFast(raw); ok {
		return h, nil
	}
	return parseHeaderSlow(raw)
}

// streamDataPrefix opens every byte-stream data notification the
// encoders build (delivery/bytestream's Encoder), and JSON.stringify's for
// the same object.
const streamDataPrefix = `{"jsonrpc":"2.0","method":"` + BinaryDataMethod + `","params":{"channel":"`

// parseStreamData is the path of bulk stream data: a notification that
// starts with streamDataPrefix, ends with "}}", is all ASCII and has a
// channel string without escapes. Its header is known from the prefix, so
// neither gjson's validation nor a scan of the (large) base64 string is
// needed; Params is marked unchecked: delivery/bytestream's AppendData
// validates it as strictly as encoding/json would (and rejects what does
// not end the object where this assumed), so nothing here is trusted
// unchecked.
func parseStreamData(raw []byte) (*Header, bool) {
	if len(raw) < len(streamDataPrefix)+4 || string(raw[:len(streamDataPrefix)]) != streamDataPrefix ||
		raw[len(raw)-1] != '}' || raw[len(raw)-2] != '}' || !isASCII(raw) {
		return nil, false
	}
	channel, ok := plainStringBody(raw[len(streamDataPrefix):])
	if !ok {
		return nil, false
	}
	h := prefixHeader(raw, streamDataPrefix, BinaryDataMethod, channel)
	h.ParamsUnchecked = true
	return h, true
}

// prefixHeader is the header of a notification whose method is known from
// its prefix, which ends inside its params' first member, the channel
// string ("params":{"channel":"), and whose text ends with the params and
// "}": Params is a view of raw from that member's object on.
func prefixHeader(raw []byte, prefix, method string, channel []byte) *Header {
	start := len(prefix) - len(`{"channel":"`)
	return &Header{
		JSONRPC: "2.0",
		Method:  method,
		Params:  raw[start : len(raw)-1 : len(raw)-1],
		Channel: string(channel),
		ASCII:   true,
	}
}

// creditPrefix opens every channel/credit notification delivery.AppendCredit
// builds, and JSON.stringify's for the same object.
const creditPrefix = `{"jsonrpc":"2.0","method":"channel/credit","params":{"channel":"`

// ParseCredit reads a channel/credit notification in exactly
// delivery.AppendCredit's form (JSON.stringify's too),
//
//	{"jsonrpc":"2.0","method":"channel/credit","params":{"channel":"C","consumedBytes":N}}
//
// with C printable ASCII without '"' or '\\', N a non-negative integer
// of at most 18 digits without leading zeros, and nothing after. Such a
// text is valid JSON whose meaning is known from its shape, so it is
// checked byte by byte instead of parsed, and nothing is allocated:
// channel is a view of raw (valid while raw is). Any other text, a
// credit in another form (member order, whitespace, escapes) included,
// gives ok false: ParseHeader and DecodeParams take it.
func ParseCredit(raw []byte) (channel []byte, consumed delivery.UTF16Bytes, ok bool) {
	if len(raw) < len(creditPrefix) || string(raw[:len(creditPrefix)]) != creditPrefix {
		return nil, 0, false
	}
	rest := raw[len(creditPrefix):]
	channel, ok = plainStringBody(rest)
	if !ok {
		return nil, 0, false
	}
	n, ok := parseConsumed(rest[len(channel)+1:])
	if !ok {
		return nil, 0, false
	}
	return channel, delivery.UTF16Bytes(n), true
}

// parseCredit is ParseHeader's path for what ParseCredit accepts: the
// header parseHeaderFast would give, without parsing.
func parseCredit(raw []byte) (*Header, bool) {
	channel, _, ok := ParseCredit(raw)
	if !ok {
		return nil, false
	}
	return prefixHeader(raw, creditPrefix, MethodChannelCredit, channel), true
}

// plainStringBody returns the body of the JSON string that b starts
// inside of (just after its opening quote) up to its closing quote, when
// every byte of it is printable ASCII other than '\\' (so the body is
// the string's value as is).
func plainStringBody(b []byte) ([]byte, bool) {
	for i, c := range b {
		switch {
		case c == '"':
			return b[:i], true
		case c < 0x20 || c >= utf8.RuneSelf || c == '\\':
			return nil, false
		}
	}
	return nil, false
}

// parseConsumed parses `,"consumedBytes":N}}`, which must be all of b:
// the rest of a credit after its channel's closing quote. N is a
// non-negative integer of at most 18 digits without leading zeros.
func parseConsumed(b []byte) (int64, bool) {
	const member = `,"consumedBytes":`
	if len(b) < len(member) || string(b[:len(member)]) != member {
		return 0, false
	}
	b = b[len(member):]
	n, digits := int64(0), 0
	for digits < len(b) && b[digits] >= '0' && b[digits] <= '9' {
		n = n*10 + int64(b[digits]-'0')
		digits++
	}
	if digits == 0 || digits > 18 || (digits > 1 && b[0] == '0') {
		return 0, false
	}
	if string(b[digits:]) != "}}" {
		return 0, false
	}
	return n, true
}

// isASCII reports whether b has no byte at or above 0x80, 32 bytes a
// step.
func isASCII(b []byte) bool {
	const hi = 0x8080808080808080
	for len(b) >= 32 {
		v := binary.LittleEndian.Uint64(b) | binary.LittleEndian.Uint64(b[8:]) |
			binary.LittleEndian.Uint64(b[16:]) | binary.LittleEndian.Uint64(b[24:])
		if v&hi != 0 {
			return false
		}
		b = b[32:]
	}
	for _, c := range b {
		if c >= 0x80 {
			return false
		}
	}
	return true
}

// parseHeaderFast handles the well-formed common case in one validation
// pass (gjson, about 1 GB/s) and one scan for the top-level members, with
// params, id, result and error as sub-slices of raw (no copies). Anything
// unusual (invalid JSON, odd types) is left to parseHeaderSlow, which gives
// the exact error.
func parseHeaderFast(raw []byte) (*Header, bool) {
	ascii := isASCII(raw)
	if len(raw) == 0 || !ascii && !utf8.Valid(raw) || !gjson.ValidBytes(raw) {
		return nil, false // encoding/json turns bad UTF-8 into U+FFFD: slow path
	}
	trimmed := bytes.TrimLeft(raw, " \t\r\n")
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, false
	}
	// raw is not modified while these views are alive; the strings kept
	// in the Header are cloned.
	str := unsafe.String(unsafe.SliceData(raw), len(raw))
	span := func(r gjson.Result) ([]byte, bool) {
		if !r.Exists() {
			return nil, true
		}
		if r.Index <= 0 || r.Index+len(r.Raw) > len(raw) {
			return nil, false
		}
		return raw[r.Index : r.Index+len(r.Raw) : r.Index+len(r.Raw)], true
	}
	h := Header{ASCII: ascii}
	ok, seenVersion := true, false
	seen := map[string]bool{}
	gjson.Parse(str).ForEach(func(key, r gjson.Result) bool {
		name := strings.ToLower(key.Str)
		switch name {
		case "jsonrpc", "id", "method", "params", "result", "error":
			// encoding/json matches member names case-insensitively and
			// keeps the last of repeated ones; gjson does neither: leave
			// such messages to the slow path.
			if key.Str != name || seen[name] {
				ok = false
				return false
			}
			seen[name] = true
		}
		switch key.Str {
		case "jsonrpc":
			if r.Type != gjson.String || r.Str != "2.0" {
				ok = false
			}
			h.JSONRPC, seenVersion = "2.0", true
		case "id":
			switch r.Type {
			case gjson.String:
			case gjson.Number:
				ok = validID([]byte(r.Raw))
			default:
				ok = false
			}
			if ok {
				h.ID, ok = span(r)
			}
		case "method":
			if r.Type != gjson.String {
				ok = false
			}
			h.Method = strings.Clone(r.Str)
		case "params":
			h.Params, ok = span(r)
			if ok && r.IsObject() {
				if c := gjson.Get(r.Raw, "channel"); c.Type == gjson.String {
					h.Channel = strings.Clone(c.Str)
				}
			}
		case "result":
			h.Result, ok = span(r)
		case "error":
			h.Error, ok = span(r)
		}
		return ok
	})
	if !ok || !seenVersion {
		return nil, false
	}
	if h.Method == "" && h.Result == nil && h.Error == nil {
		return nil, false
	}
	return &h, true
}

func parseHeaderSlow(raw []byte) (*Header, *Error) {
	trimmed := bytes.TrimLeft(raw, " \t\r\n")
	if len(trimmed) > 0 && trimmed[0] == '[' {
		return &Header{}, &Error{Code: CodeInvalidRequest, Message: ErrBatch.Error()}
	}
	// Members by their exact names: JSON-RPC's are case-sensitive
	// ("Method" is not "method"), unlike encoding/json's struct fields.
	// Of a repeated member the last counts, as in encoding/json.
	var members map[string]json.RawMessage
	if err := json.Unmarshal(raw, &members); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			return &Header{}, Errorf(CodeInvalidRequest, "invalid request: a message of the wrong type (%s): it must be a JSON object", typeErr.Value)
		}
		return &Header{}, Errorf(CodeParseError, "parse error: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	if members == nil {
		return &Header{}, Errorf(CodeInvalidRequest, "invalid request: a message of the wrong type (null): it must be a JSON object")
	}
	var h Header
	// The id first, so that every error below can name it.
	if id, ok := members["id"]; ok {
		if string(id) != "null" && !validID(id) {
			return &Header{}, Errorf(CodeInvalidRequest, "invalid request: id must be a string or an integer from 0 to %d", MaxID)
		}
		h.ID = id
	}
	if v, ok := members["jsonrpc"]; !ok || json.Unmarshal(v, &h.JSONRPC) != nil || h.JSONRPC != "2.0" {
		h.JSONRPC = ""
		return &h, Errorf(CodeInvalidRequest, `invalid request: "jsonrpc" must be "2.0"`)
	}
	if v, ok := members["method"]; ok && json.Unmarshal(v, &h.Method) != nil {
		return &h, Errorf(CodeInvalidRequest, `invalid request: field "method" has the wrong type`)
	}
	h.Params, h.Result, h.Error = members["params"], members["result"], members["error"]
	if h.Method == "" && h.Result == nil && h.Error == nil {
		return &h, Errorf(CodeInvalidRequest, "invalid request: no method")
	}
	if h.Method != "" && string(h.ID) == "null" {
		// JSON-RPC 2.0 §4: a request with "id":null is still a request,
		// not a notification, and null is what error responses name when
		// the id is unknown: AHP's ids are strings or integers.
		return &h, Errorf(CodeInvalidRequest, "invalid request: id must be a string or an integer from 0 to %d, not null (leave the id out for a notification)", MaxID)
	}
	if len(h.Params) > 0 && h.Params[0] == '{' {
		h.Channel = topLevelString(h.Params, "channel")
	}
	return &h, nil
}

// topLevelString returns the string value of key in the JSON object obj
// (already validated), or "" when absent or not a string. It reads tokens
// and stops at the key, so the usual params, with channel first, cost
// almost nothing.
func topLevelString(obj []byte, key string) string {
	dec := json.NewDecoder(bytes.NewReader(obj))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return ""
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return ""
		}
		if k, _ := t.(string); k == key {
			v, err := dec.Token()
			if err != nil {
				return ""
			}
			s, _ := v.(string)
			return s
		}
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			return ""
		}
	}
	return ""
}

// DecodeParams decodes params into v; a failure becomes -32602 naming the
// field.
func DecodeParams(params json.RawMessage, v any) *Error {
	if len(params) == 0 || string(params) == "null" {
		return Errorf(CodeInvalidParams, "invalid params: params object required")
	}
	if err := json.Unmarshal(params, v); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			field := typeErr.Field
			if field == "" {
				return Errorf(CodeInvalidParams, "invalid params: params must be an object")
			}
			return Errorf(CodeInvalidParams, "invalid params: %q must be %s", field, jsonKind(typeErr.Type.Kind().String()))
		}
		return Errorf(CodeInvalidParams, "invalid params: %v", err)
	}
	return nil
}

func jsonKind(goKind string) string {
	switch goKind {
	case "string":
		return "a string"
	case "uint64", "uint32", "uint16", "uint8":
		return "an integer from 0 to " + maxOf(goKind)
	case "int", "int64", "int32":
		return "an integer"
	case "float64":
		return "a number"
	case "bool":
		return "a boolean"
	case "slice":
		return "an array"
	case "struct", "map", "ptr":
		return "an object"
	}
	return "of another type"
}

// maxOf is the largest value of an unsigned integer kind, in decimal.
func maxOf(goKind string) string {
	switch goKind {
	case "uint64":
		return "18446744073709551615"
	case "uint32":
		return "4294967295"
	case "uint16":
		return "65535"
	case "uint8":
		return "255"
	}
	return "?"
}

// Missing returns -32602 naming a required field that is absent.
func Missing(field string) *Error {
	return Errorf(CodeInvalidParams, "invalid params: %q is required", field)
}
