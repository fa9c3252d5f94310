package transportio

import (
	"context"
	"errors"
	"fmt"
)

// SendDatagram sends payload on the unreliable lane for event (§7). The
// payload is checked against the path's datagram size at send time (§7.4):
// too large is ErrDatagramTooLarge and nothing is sent. It is queued in the
// per-peer ring (§9), where overflow discards the oldest and the stale are
// discarded at dequeue; on the WebSocket mapping it travels as a DATAGRAM
// frame, moved onto the emit lane only below DatagramLaneMark frames.
func (s *Session) SendDatagram(event string, payload []byte) error {
	ev, ok := s.cfg.Contract.Lookup(event)
	if !ok {
		return fmt.Errorf("%w: '%s'", ErrUnknownEvent, event)
	}
	if ev.Lane != LaneUnreliable {
		return fmt.Errorf("%w: '%s' is on the reliable lane", ErrWrongShape, event)
	}
	dc, hasDatagrams := s.car.(DatagramCarrier)
	if !hasDatagrams && s.car.Kind() != KindWebSocket {
		return ErrLaneUnavailable
	}
	size := 0
	if hasDatagrams {
		size = dc.MaxDatagramSize()
	}
	if len(payload) > MaxDatagramPayload(size) {
		return fmt.Errorf("%w: %d bytes, at most %d here", ErrDatagramTooLarge, len(payload), MaxDatagramPayload(size))
	}
	if len(payload) == 0 {
		return errors.New("transportio: a datagram needs at least one payload byte")
	}
	if err := s.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	seq := NextSequence(s.seq[ev.ID])
	s.seq[ev.ID] = seq
	b := AppendDatagram(nil, Datagram{Codec: ev.Payload, EventID: ev.ID, Origin: s.cfg.Origin, Sequence: seq, Payload: payload})
	s.ring.Push(b, s.cfg.Now())
	s.mu.Unlock()
	if hasDatagrams {
		notify(s.dgWake)
	} else {
		notify(s.wake)
	}
	return nil
}

// moveDatagramsLocked moves ring entries onto the emit lane as DATAGRAM
// frames while it holds fewer than DatagramLaneMark frames (§3.3).
func (s *Session) moveDatagramsLocked() {
	now := s.cfg.Now()
	for len(s.q)+s.inflight < DatagramLaneMark {
		b, ok := s.ring.Pop(now)
		if !ok {
			return
		}
		s.q = append(s.q, AppendFrame(nil, Frame{Type: FrameDatagram, Codec: CodecJSON, Payload: b}))
		s.pendingBytes += len(s.q[len(s.q)-1])
	}
}

// datagramWriter drains the ring onto QUIC datagrams.
func (s *Session) datagramWriter(dc DatagramCarrier) {
	defer s.wg.Done()
	for {
		select {
		case <-s.dgWake:
		case <-s.ctx.Done():
			return
		}
		for {
			s.mu.Lock()
			b, ok := s.ring.Pop(s.cfg.Now())
			s.mu.Unlock()
			if !ok {
				break
			}
			if err := dc.SendDatagram(b); err != nil && s.ctx.Err() != nil {
				return
			}
		}
	}
}

func (s *Session) datagramReader(dc DatagramCarrier) {
	defer s.wg.Done()
	for {
		b, err := dc.ReceiveDatagram(s.ctx)
		if err != nil {
			return
		}
		s.receiveDatagram(b)
	}
}

// receiveDatagram applies §7.2–7.3 to one inbound datagram: before the
// handshake, malformed, unknown, reliable-lane, wrong-codec or stale
// datagrams are discarded and the session stays open.
func (s *Session) receiveDatagram(b []byte) {
	select {
	case <-s.hsDone:
	default:
		return // §7.5: before the handshake completes, discarded silently
	}
	d, ok := ParseDatagram(b)
	if !ok {
		return
	}
	ev, known := s.cfg.Contract.ByID(d.EventID)
	if !known || ev.Lane != LaneUnreliable {
		s.unknownDropped.Add(1)
		return
	}
	if d.Codec != ev.Payload {
		return
	}
	s.gateMu.Lock()
	fresh := s.gate.Accept(d.Origin, d.EventID, d.Sequence, s.cfg.Now())
	s.gateMu.Unlock()
	if !fresh {
		s.seqDropped.Add(1)
		return
	}
	m := Message{Event: ev.Name, Codec: d.Codec, Payload: append([]byte(nil), d.Payload...), Origin: d.Origin, Sequence: d.Sequence}
	select {
	case s.dgrams <- m:
	default:
		s.recvDropped.Add(1)
	}
}

// ReceiveDatagram returns the next accepted datagram.
func (s *Session) ReceiveDatagram(ctx context.Context) (Message, error) {
	select {
	case m := <-s.dgrams:
		return m, nil
	case <-ctx.Done():
		return Message{}, ctx.Err()
	case <-s.ctx.Done():
		return Message{}, s.Err()
	}
}
