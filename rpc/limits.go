package rpc

import (
	"encoding/json"
	"strconv"
)

// MaxDepth bounds how deeply the JSON text of one incoming message may
// nest arrays and objects (the top-level object is depth 1). No AHP
// message comes near it (a dispatchAction's action is at depth 4, an OTLP
// batch at 10); it is there so that nothing parses a hostile message
// recursively: gjson's validator, for one, recurses once per level, and
// 1,048,000 nested '[' in a 1 MiB message held about 125 MB of stack.
// ParseHeader checks it in one linear scan before anything else parses the
// text; deeper is -32600 (ErrTooDeep's text), answered with the id when
// the top level holds a valid one.
const MaxDepth = 128

// MaxID is the largest numeric request id the host represents (uint64).
// A larger one, or any other number that is not a non-negative integer,
// is -32600 answered with "id":null (JSON-RPC 2.0 §5: the id could not
// be read).
const MaxID = ^uint64(0)

// depthWithin reports whether the JSON text b nests arrays and objects at
// most max deep. It does not validate b: it counts brackets outside
// strings (skipping escapes) in one pass, without recursion or
// allocation, so that a recursive parser may be given only text that
// passed it.
func depthWithin(b []byte, max int) bool {
	depth := 0
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '"':
			i = stringEnd(b, i)
		case '[', '{':
			depth++
			if depth > max {
				return false
			}
		case ']', '}':
			depth--
		}
	}
	return true
}

// stringEnd returns the index of the quote that closes the JSON string
// opening at b[i] (len(b) if it does not close), skipping escapes.
func stringEnd(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i
		}
	}
	return len(b)
}

// valueEnd returns the index just after the JSON value starting at b[i]
// (not validated): a string, a balanced array or object (brackets counted
// outside strings, no recursion), or a literal up to the next delimiter.
func valueEnd(b []byte, i int) int {
	if i >= len(b) {
		return i
	}
	switch b[i] {
	case '"':
		return min(stringEnd(b, i)+1, len(b))
	case '[', '{':
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				i = stringEnd(b, i)
			case '[', '{':
				depth++
			case ']', '}':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
		}
		return len(b)
	}
	for ; i < len(b); i++ {
		switch b[i] {
		case ',', '}', ']', ' ', '\t', '\r', '\n':
			return i
		}
	}
	return i
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
		i++
	}
	return i
}

// topLevelID returns the "id" member of the JSON object b when it can be
// found without parsing b (which may be too deep to parse) and is a valid
// id (validID), else nil. It walks the top-level members only, skipping
// each value by counting brackets.
func topLevelID(b []byte) json.RawMessage {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return nil
	}
	i++
	for {
		i = skipSpace(b, i)
		if i >= len(b) || b[i] != '"' {
			return nil
		}
		keyEnd := stringEnd(b, i)
		if keyEnd >= len(b) {
			return nil
		}
		key := b[i+1 : keyEnd]
		i = skipSpace(b, keyEnd+1)
		if i >= len(b) || b[i] != ':' {
			return nil
		}
		i = skipSpace(b, i+1)
		end := valueEnd(b, i)
		if string(key) == "id" {
			if v := b[i:end:end]; validID(v) {
				return v
			}
			return nil
		}
		i = skipSpace(b, end)
		if i >= len(b) || b[i] != ',' {
			return nil
		}
		i++
	}
}

// validID reports whether raw is an id the host can answer with: a JSON
// string, or an integer from 0 to MaxID written without a sign, fraction
// or exponent.
func validID(raw []byte) bool {
	if len(raw) == 0 {
		return false
	}
	if raw[0] == '"' {
		var s string
		return json.Unmarshal(raw, &s) == nil
	}
	if len(raw) > 1 && raw[0] == '0' {
		return false
	}
	_, err := strconv.ParseUint(string(raw), 10, 64)
	return err == nil
}

// MaxClientIDBytes bounds a clientId (initialize, reconnect, a claim's):
// the host keeps it with every terminal a client creates or claims,
// lists it in the catalogue and names the client by it in its log lines,
// so it must not grow with what a peer sends (a 500 kB one was accepted
// and repeated in every line). Longer is -32602 (CheckClientID).
const MaxClientIDBytes = 256

// MaxNameBytes bounds a terminal's name (createTerminal) and a title a
// client sets (terminal/titleChanged): both are kept, listed in the root
// catalogue sent to every client and shown in tables.
const MaxNameBytes = 1024

// CheckClientID returns -32602 naming field when id is empty, longer
// than MaxClientIDBytes or holds a control character (C0 or DEL: it
// would break log lines and the tables that show it), else nil.
func CheckClientID(field, id string) *Error {
	if id == "" {
		return Missing(field)
	}
	bad := len(id) > MaxClientIDBytes
	for i := 0; i < len(id) && !bad; i++ {
		bad = id[i] < ' ' || id[i] == 0x7f
	}
	if bad {
		return Errorf(CodeInvalidParams, "invalid params: %q must be 1-%d bytes without control characters (got %d bytes)", field, MaxClientIDBytes, len(id))
	}
	return nil
}
