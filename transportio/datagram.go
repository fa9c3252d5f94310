package transportio

import (
	"encoding/binary"
	"time"
)

// Datagram is one unreliable-lane message (§7.1).
type Datagram struct {
	Codec    Codec
	EventID  uint32
	Origin   uint32
	Sequence uint32
	Payload  []byte
}

// Len is the encoded length of d.
func (d Datagram) Len() int { return DatagramHeaderLen + len(d.Payload) }

// AppendDatagram appends the encoding of d to b. There is no length
// prefix: the datagram's boundary is the message (§7.1).
func AppendDatagram(b []byte, d Datagram) []byte {
	b = append(b, byte(d.Codec))
	b = binary.BigEndian.AppendUint32(b, d.EventID)
	b = binary.BigEndian.AppendUint32(b, d.Origin)
	b = binary.BigEndian.AppendUint32(b, d.Sequence)
	return append(b, d.Payload...)
}

// ParseDatagram parses b. ok is false for a datagram that carries no valid
// event: shorter than the header or with an empty payload (§7.2), event id
// 0, or a codec outside version 0. Such a datagram is discarded silently and
// the session stays open. The payload aliases b.
func ParseDatagram(b []byte) (d Datagram, ok bool) {
	if len(b) <= DatagramHeaderLen {
		return d, false
	}
	d = Datagram{
		Codec:    Codec(b[0]),
		EventID:  binary.BigEndian.Uint32(b[1:]),
		Origin:   binary.BigEndian.Uint32(b[5:]),
		Sequence: binary.BigEndian.Uint32(b[9:]),
		Payload:  b[DatagramHeaderLen:],
	}
	if !d.Codec.Valid() || d.EventID == 0 {
		return d, false
	}
	return d, true
}

// MaxDatagramPayload is the largest payload for a transport reporting
// effective bytes per datagram; 0 means unreported and uses the 1024-byte
// floor (§7.4).
func MaxDatagramPayload(effective int) int {
	if effective <= 0 {
		effective = DefaultDatagramSize
	}
	return effective - DatagramHeaderLen
}

// SeqNewer reports whether seq is after last in the circular u32 order:
// (seq-last) mod 2³² in [1, 0x7FFFFFFF] (§7.3).
func SeqNewer(seq, last uint32) bool {
	d := seq - last
	return d >= 1 && d <= 0x7FFFFFFF
}

// NextSequence returns the sequence after s: from 1, wrapping from
// 0xFFFFFFFF to 1, never 0 (§7.3).
func NextSequence(s uint32) uint32 {
	if s == 0xFFFFFFFF {
		return 1
	}
	return s + 1
}

type gateKey struct{ origin, event uint32 }

type gateEntry struct {
	last uint32
	seen time.Time
}

// SequenceGate applies last-write-wins per (origin, event) (§7.3): the first
// datagram of a pair is accepted whatever its sequence, later ones only if
// newer in circular order. State idle for SequenceRetention is forgotten.
// It has no goroutines; the time is passed in. Not safe for concurrent use.
type SequenceGate struct {
	m         map[gateKey]gateEntry
	lastSweep time.Time
	// Discarded counts datagrams refused as not newer.
	Discarded uint64
}

// Accept reports whether the datagram is delivered, and records it.
func (g *SequenceGate) Accept(origin, event, seq uint32, now time.Time) bool {
	if g.m == nil {
		g.m = map[gateKey]gateEntry{}
		g.lastSweep = now
	}
	if now.Sub(g.lastSweep) >= SequenceRetention/4 {
		g.sweep(now)
	}
	k := gateKey{origin, event}
	e, ok := g.m[k]
	if ok && now.Sub(e.seen) >= SequenceRetention {
		ok = false
	}
	if ok && !SeqNewer(seq, e.last) {
		g.Discarded++
		return false
	}
	g.m[k] = gateEntry{last: seq, seen: now}
	return true
}

// Len is the number of pairs held.
func (g *SequenceGate) Len() int { return len(g.m) }

func (g *SequenceGate) sweep(now time.Time) {
	for k, e := range g.m {
		if now.Sub(e.seen) >= SequenceRetention {
			delete(g.m, k)
		}
	}
	g.lastSweep = now
}
