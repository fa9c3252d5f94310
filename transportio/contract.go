package transportio

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"sort"
)

// Shape is how an event is answered (§3.2).
type Shape uint8

// Shapes.
const (
	ShapeEmit    Shape = iota // fire and forget (§6.1)
	ShapeReturns              // a call answered by one CALL_RESPONSE or CALL_ERROR
	ShapeYields               // a call answered by a sequence under CALL_CREDIT
)

// Fallback is what an unreliable event accepts on a reliable-only mapping
// (§7.6).
type Fallback string

// Fallbacks.
const (
	FallbackNone   Fallback = ""
	FallbackNewest Fallback = "newest"
)

// Event is one contract entry.
type Event struct {
	Name string
	// ID overrides the derived id (SHA-256 of the name, first 4 bytes).
	ID    uint32
	Lane  Lane
	Shape Shape
	// Payload, Result: the codec of the payload and of the returns/yields
	// slot; zero means JSON.
	Payload, Result Codec
	// Fallback applies to unreliable events only.
	Fallback Fallback
}

// EventID is the derived event id of name (§5.4).
func EventID(name string) uint32 {
	sum := sha256.Sum256([]byte(name))
	return binary.BigEndian.Uint32(sum[:4])
}

// Contract is an immutable event table.
type Contract struct {
	events []Event // sorted by name (byte order is code-point order)
	byName map[string]*Event
	byID   map[uint32]*Event
}

// NewContract builds a contract. Two events whose ids collide, an id of 0, a
// duplicate name, or a call shape on the unreliable lane are construction
// errors naming the events (§5.4).
func NewContract(events ...Event) (*Contract, error) {
	c := &Contract{byName: map[string]*Event{}, byID: map[uint32]*Event{}}
	c.events = append([]Event(nil), events...)
	sort.Slice(c.events, func(i, j int) bool { return c.events[i].Name < c.events[j].Name })
	for i := range c.events {
		e := &c.events[i]
		if e.ID == 0 {
			e.ID = EventID(e.Name)
		}
		if e.ID == 0 {
			return nil, fmt.Errorf("transportio: event '%s' has id 0, which is reserved: give it an explicit id", e.Name)
		}
		if e.Lane == "" {
			e.Lane = LaneReliable
		}
		if e.Lane != LaneReliable && e.Lane != LaneUnreliable {
			return nil, fmt.Errorf("transportio: event '%s' has lane %q", e.Name, e.Lane)
		}
		if e.Lane == LaneUnreliable && e.Shape != ShapeEmit {
			return nil, fmt.Errorf("transportio: event '%s' is unreliable and so cannot be called", e.Name)
		}
		if e.Payload == 0 {
			e.Payload = CodecJSON
		}
		if e.Result == 0 {
			e.Result = CodecJSON
		}
		if _, dup := c.byName[e.Name]; dup {
			return nil, fmt.Errorf("transportio: event '%s' is declared twice", e.Name)
		}
		if o, dup := c.byID[e.ID]; dup {
			return nil, fmt.Errorf("transportio: events '%s' and '%s' share id %d: give one an explicit id", o.Name, e.Name, e.ID)
		}
		c.byName[e.Name] = e
		c.byID[e.ID] = e
	}
	return c, nil
}

// MustContract is NewContract that panics, for package-level contracts.
func MustContract(events ...Event) *Contract {
	c, err := NewContract(events...)
	if err != nil {
		panic(err)
	}
	return c
}

// Lookup returns the event called name.
func (c *Contract) Lookup(name string) (Event, bool) {
	e, ok := c.byName[name]
	if !ok {
		return Event{}, false
	}
	return *e, true
}

// ByID returns the event with id.
func (c *Contract) ByID(id uint32) (Event, bool) {
	e, ok := c.byID[id]
	if !ok {
		return Event{}, false
	}
	return *e, true
}

// Events returns the events sorted by name.
func (c *Contract) Events() []Event { return append([]Event(nil), c.events...) }

// Table is the handshake's event table (§4.3), sorted by name.
func (c *Contract) Table() []WireEvent {
	t := make([]WireEvent, len(c.events))
	for i, e := range c.events {
		t[i] = WireEvent{Name: e.Name, ID: e.ID, Lane: e.Lane}
	}
	return t
}

// undeclaredUnreliable returns the unreliable events with no fallback: a
// reliable-only mapping refuses such a contract (§2, §7.6).
func (c *Contract) undeclaredUnreliable() []string {
	var names []string
	for _, e := range c.events {
		if e.Lane == LaneUnreliable && e.Fallback == FallbackNone {
			names = append(names, e.Name)
		}
	}
	return names
}
