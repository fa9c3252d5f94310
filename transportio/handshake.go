package transportio

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
)

// WireEvent is one [name, id, lane] triple of the event table (§4.3).
type WireEvent struct {
	Name string
	ID   uint32
	Lane Lane
}

// MarshalJSON encodes the triple.
func (w WireEvent) MarshalJSON() ([]byte, error) {
	return json.Marshal([]any{w.Name, w.ID, w.Lane})
}

// Handshake is the payload of frame 0 (§4.1): exhaustively {v, feat, events}.
type Handshake struct {
	V      int         `json:"v"`
	Feat   []string    `json:"feat"`
	Events []WireEvent `json:"events"`
}

// AppendHandshake appends the HANDSHAKE frame of h (codec JSON, id 0).
func AppendHandshake(b []byte, h Handshake) []byte {
	if h.Feat == nil {
		h.Feat = []string{}
	}
	if h.Events == nil {
		h.Events = []WireEvent{}
	}
	p, _ := json.Marshal(h) // cannot fail: strings and integers only
	return AppendFrame(b, Frame{Type: FrameHandshake, Codec: CodecJSON, Payload: p})
}

// ParseHandshake parses a HANDSHAKE payload strictly: an object with an
// integer v, feat an array of strings and events an array of
// [string, u32, "reliable"|"unreliable"] triples. Anything else is a
// *FrameError (WT_PROTOCOL_ERROR, §4.1 and checklist item 20).
func ParseHandshake(p []byte) (Handshake, error) {
	bad := func(why string) (Handshake, error) {
		return Handshake{}, frameErr("WT_PROTOCOL_ERROR", "malformed handshake: %s", why)
	}
	var raw struct {
		V      *json.RawMessage  `json:"v"`
		Feat   []json.RawMessage `json:"feat"`
		Events []json.RawMessage `json:"events"`
	}
	d := json.NewDecoder(bytes.NewReader(p))
	d.UseNumber()
	if t, err := d.Token(); err != nil || t != json.Delim('{') {
		return bad("not an object")
	}
	if err := json.Unmarshal(p, &raw); err != nil {
		return bad("not an object of {v, feat, events}")
	}
	var h Handshake
	if raw.V == nil {
		return bad("`v` is missing")
	}
	v, ok := jsonUint(*raw.V, math.MaxInt32)
	if !ok {
		return bad("`v` is not a non-negative integer")
	}
	h.V = int(v)
	if raw.Feat == nil {
		return bad("`feat` is not an array of strings")
	}
	h.Feat = make([]string, 0, len(raw.Feat))
	for _, f := range raw.Feat {
		var s string
		if json.Unmarshal(f, &s) != nil {
			return bad("`feat` is not an array of strings")
		}
		h.Feat = append(h.Feat, s)
	}
	if raw.Events == nil {
		return bad("`events` is not an array of [name, id, lane] triples")
	}
	h.Events = make([]WireEvent, 0, len(raw.Events))
	for _, e := range raw.Events {
		var tri []json.RawMessage
		if json.Unmarshal(e, &tri) != nil || len(tri) != 3 {
			return bad("`events` is not an array of [name, id, lane] triples")
		}
		var w WireEvent
		var lane string
		if json.Unmarshal(tri[0], &w.Name) != nil || json.Unmarshal(tri[2], &lane) != nil {
			return bad("`events` is not an array of [name, id, lane] triples")
		}
		id, ok := jsonUint(tri[1], math.MaxUint32)
		if !ok {
			return bad(fmt.Sprintf("event '%s' has an id that is not a u32", w.Name))
		}
		w.ID = uint32(id)
		w.Lane = Lane(lane)
		if w.Lane != LaneReliable && w.Lane != LaneUnreliable {
			return bad(fmt.Sprintf("event '%s' has lane %q", w.Name, lane))
		}
		h.Events = append(h.Events, w)
	}
	return h, nil
}

// jsonUint reads a JSON integer in [0, max].
func jsonUint(raw json.RawMessage, max uint64) (uint64, bool) {
	if len(raw) == 0 || raw[0] < '0' || raw[0] > '9' {
		return 0, false
	}
	var n json.Number
	if json.Unmarshal(raw, &n) != nil {
		return 0, false
	}
	var u uint64
	if _, err := fmt.Sscan(n.String(), &u); err != nil || fmt.Sprint(u) != n.String() || u > max {
		return 0, false
	}
	return u, true
}

// Negotiation is the outcome of a successful handshake.
type Negotiation struct {
	// Feat is the intersection of both feature sets (§4.2).
	Feat []string
	// PeerOnly and LocalOnly are event names known to one side only: legal,
	// and answered per message with WT_UNKNOWN_EVENT (§4.3).
	PeerOnly, LocalOnly []string
}

// Negotiate compares the peer's handshake with ours (§4.2–4.4): the version
// first, then the event table entry by entry; features last, never fatal.
// A refusal is a *SessionError with the code and a reason naming the event.
func Negotiate(local *Contract, feat []string, peer Handshake) (Negotiation, error) {
	if peer.V != Version {
		return Negotiation{}, &SessionError{Code: CloseProtocolVersionMismatch,
			Reason: fmt.Sprintf("peer speaks protocol v%d and this is v%d", peer.V, Version)}
	}
	seen := map[string]bool{}
	var n Negotiation
	for _, pe := range peer.Events {
		if pe.ID == 0 {
			return n, &SessionError{Code: CloseContractMismatch, Reason: fmt.Sprintf("peer event '%s' has the reserved id 0", pe.Name)}
		}
		if mine, ok := local.byName[pe.Name]; ok {
			seen[pe.Name] = true
			if mine.Lane != pe.Lane {
				return n, &SessionError{Code: CloseContractMismatch, Reason: fmt.Sprintf("event '%s' is '%s' here and '%s' at the peer", pe.Name, mine.Lane, pe.Lane)}
			}
			if mine.ID != pe.ID {
				return n, &SessionError{Code: CloseContractMismatch, Reason: fmt.Sprintf("event '%s' is id %d here and %d at the peer", pe.Name, mine.ID, pe.ID)}
			}
			continue
		}
		if other, ok := local.byID[pe.ID]; ok {
			return n, &SessionError{Code: CloseContractMismatch, Reason: fmt.Sprintf("peer event '%s' has id %d, which is '%s' here", pe.Name, pe.ID, other.Name)}
		}
		n.PeerOnly = append(n.PeerOnly, pe.Name)
	}
	for _, e := range local.events {
		if !seen[e.Name] {
			n.LocalOnly = append(n.LocalOnly, e.Name)
		}
	}
	peerFeat := map[string]bool{}
	for _, f := range peer.Feat {
		peerFeat[f] = true
	}
	n.Feat = []string{}
	for _, f := range feat {
		if peerFeat[f] {
			n.Feat = append(n.Feat, f)
		}
	}
	return n, nil
}
