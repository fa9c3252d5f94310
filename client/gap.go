package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/sidecar-dev/sidecar/rpc"
)

// Gap recovery (seed 003 "gap, don't drop silently", docs/protocol.md
// "channel/page"): on an ordinary subscription to a state-bearing channel
// a channel/gap is a state, not a warning. The subscription goes Stale
// (live actions that arrive are held, not delivered), pages the missing
// actions by cursor from the last one it delivered (Paging), delivers
// them, then the held ones, in serverSeq order, each once, and is Current
// again. When the journal no longer reaches back (-32051) or more than
// maxHeldActions / maxHeldBytes arrive while paging, it subscribes again
// and delivers the fresh snapshot as a channel/snapshot message instead.
// Consumers of Next see only the result: actions in order, or a
// channel/snapshot that replaces the state. A live-only channel (no
// snapshot: telemetry) has nothing to page: its gaps are delivered as
// channel/gap messages.

// SyncState is where an ordinary subscription stands after a gap
// (SyncStatus.State, Subscription.State).
type SyncState int

// The states, in the order OnSync is told them: Stale when a gap
// arrives, Paging while the missing actions are read, Current once they
// (and the actions held meanwhile) are delivered.
const (
	Current SyncState = iota // every action up to the last one delivered is delivered (the zero value)
	Stale                    // a channel/gap arrived: actions after AfterSeq are missing; live ones are held
	Paging                   // reading the missing actions with channel/page (or subscribing again)
)

func (s SyncState) String() string {
	switch s {
	case Current:
		return "current"
	case Stale:
		return "stale"
	case Paging:
		return "paging"
	}
	return fmt.Sprintf("SyncState(%d)", int(s))
}

// SyncStatus is one change of a subscription's SyncState, given to
// Options.OnSync.
type SyncStatus struct {
	Channel string
	State   SyncState
	// AfterSeq is, for Stale, the gap's afterSeq: the host pushed nothing
	// of the channel after it.
	AfterSeq uint64
	// Paged is, for Current, how many actions the cursor reads delivered
	// since Stale.
	Paged int
	// Resubscribed is, for Current, true when the missing actions could
	// not all be read (the journal no longer reached back, or more than
	// the held bound arrived meanwhile) and a fresh snapshot was
	// delivered instead (a channel/snapshot message from Next).
	Resubscribed bool
	// Err is, for Current, set when recovery failed (the subscription
	// then ended with it: Next returns it).
	Err error
}

// Bounds of gap recovery on one subscription: live actions held while
// paging (past either bound they are dropped and the subscription
// subscribes again), and the actions one channel/page asks for.
const (
	maxHeldActions = 4096
	maxHeldBytes   = 8 << 20 // UTF-8 bytes of message text
	pageLimit      = 512
)

// State returns the subscription's SyncState (always Current on a
// windowed subscription, which never gaps).
func (s *Subscription) State() SyncState {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sync
}

// syncStatus tells Options.OnSync, one call at a time per subscription.
func (s *Subscription) syncStatus(st SyncStatus) {
	if fn := s.c.opts.OnSync; fn != nil {
		st.Channel = s.Channel
		fn(st)
	}
}

// onGap handles a channel/gap on an ordinary subscription (reader
// goroutine): the subscription goes Stale and a pager starts.
func (s *Subscription) onGap(params json.RawMessage, raw []byte) error {
	var p rpc.ChannelGapParams
	_ = json.Unmarshal(params, &p)
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	s.mu.Lock()
	if s.started && s.Snapshot == nil {
		s.mu.Unlock()
		// Live only: nothing to page. The consumer learns what it missed.
		return s.q.push(&Message{Method: rpc.MethodChannelGap, Params: params, Raw: raw}, maxOrdinaryQueue)
	}
	s.gapEpoch++
	stale := s.sync == Current
	if stale {
		s.sync = Stale
	}
	start := s.started && !s.paging
	if start {
		s.paging = true
	}
	s.mu.Unlock()
	if stale {
		s.syncStatus(SyncStatus{State: Stale, AfterSeq: p.AfterSeq})
	}
	if start {
		go s.recover()
	}
	return nil
}

// hold keeps m, a live action, while the subscription is not Current;
// false when it is (deliver m now). Past the bounds the held actions are
// dropped and recovery subscribes again.
func (s *Subscription) hold(m *Message) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sync == Current {
		return false
	}
	if s.overflow {
		return true
	}
	s.held = append(s.held, m)
	s.heldBytes += len(m.Raw)
	if len(s.held) > maxHeldActions || s.heldBytes > maxHeldBytes {
		clear(s.held)
		s.held, s.heldBytes, s.overflow = nil, 0, true
	}
	return true
}

// startRecovery is called once the subscribe result is applied: a gap
// that came before it starts its pager now.
func (s *Subscription) startRecovery() {
	s.mu.Lock()
	if s.sync != Current && s.Snapshot == nil {
		// Live only (known now): nothing to page; what was held goes out.
		held := s.held
		s.sync, s.held, s.heldBytes = Current, nil, 0
		s.mu.Unlock()
		for _, m := range held {
			s.note(m.Method, m.Params, true)
			_ = s.q.push(m, maxOrdinaryQueue)
		}
		return
	}
	start := s.sync != Current && !s.paging
	if start {
		s.paging = true
	}
	s.mu.Unlock()
	if start {
		go s.recover()
	}
}

// recover is the pager (its own goroutine; one per subscription at a
// time): it pages from the last action delivered until the head (or
// subscribes again), then delivers the held actions, until no gap came
// meanwhile.
func (s *Subscription) recover() {
	ctx := s.c.ctx
	paged, resubscribed := 0, false
	s.syncMu.Lock()
	s.syncStatus(SyncStatus{State: Paging})
	s.mu.Lock()
	s.sync = Paging
	s.mu.Unlock()
	s.syncMu.Unlock()
	stop := func(err error) {
		s.syncMu.Lock()
		s.mu.Lock()
		s.paging, s.sync = false, Current
		s.held, s.heldBytes = nil, 0
		s.mu.Unlock()
		if err != nil {
			s.syncStatus(SyncStatus{State: Current, Paged: paged, Resubscribed: resubscribed, Err: err})
		}
		s.syncMu.Unlock()
		if err != nil {
			s.end(fmt.Errorf("client: gap recovery on %s failed: %w", s.Channel, err))
		}
	}
	// pagedTo is the toSeq of the last page read: the next page's afterSeq
	// (seed 003) when it is past the last action applied, as when a page
	// held only entries this client is not sent (another client's
	// rejection echo), so that such a page never ends the catch-up.
	var pagedTo uint64
	for {
		s.mu.Lock()
		epoch, after, overflow, live := s.gapEpoch, max(s.lastApplied, pagedTo), s.overflow, s.live
		s.mu.Unlock()
		if !live || s.c.Err() != nil {
			stop(nil)
			return
		}
		if overflow {
			var err error
			if epoch, err = s.resubscribe(ctx); err != nil {
				if retryable(s, err) {
					continue
				}
				if s.c.Err() != nil {
					err = nil // the Conn ended: Next says why
				}
				stop(err)
				return
			}
			resubscribed = true
		} else {
			var page rpc.ChannelPageResult
			err := s.c.Call(ctx, rpc.MethodChannelPage, rpc.ChannelPageParams{Channel: s.Channel, AfterSeq: &after, Limit: pageLimit}, &page)
			var re *rpc.Error
			switch {
			case err == nil:
			case errors.As(err, &re) && re.Code == rpc.CodeJournalTruncated:
				s.mu.Lock()
				s.overflow = true // subscribe again
				s.mu.Unlock()
				continue
			case retryable(s, err):
				continue
			case s.c.Err() != nil:
				stop(nil) // the Conn ended: Next says why
				return
			default:
				stop(err)
				return
			}
			for _, a := range page.Actions {
				raw := append(append([]byte(`{"jsonrpc":"2.0","method":"action","params":`), a...), '}')
				ok, err := s.deliver(ctx, &Message{Method: rpc.MethodAction, Params: a, Raw: raw})
				if err != nil {
					stop(nil) // ended
					return
				}
				if ok {
					paged++
				}
			}
			if page.ToSeq < page.HeadSeq && page.ToSeq > after {
				pagedTo = page.ToSeq
				continue // more to read
			}
		}
		// Read up to the head when the page was read (or subscribed
		// again): every later action is held or announced by another
		// gap. Deliver the held ones.
		switch current, err := s.drain(ctx, epoch, func() {
			s.syncStatus(SyncStatus{State: Current, Paged: paged, Resubscribed: resubscribed})
		}); {
		case err != nil:
			stop(nil) // ended
			return
		case current:
			return
		}
	}
}

// drain delivers the held actions until none is left, then makes the
// subscription Current (telling it with told, under syncMu) and returns
// true; false when a gap came after epoch or the held actions overflowed
// (page again from what is delivered).
func (s *Subscription) drain(ctx context.Context, epoch uint64, told func()) (bool, error) {
	for {
		s.syncMu.Lock()
		s.mu.Lock()
		if s.gapEpoch != epoch || s.overflow {
			s.mu.Unlock()
			s.syncMu.Unlock()
			return false, nil
		}
		if len(s.held) == 0 {
			s.sync, s.paging = Current, false
			s.mu.Unlock()
			told()
			s.syncMu.Unlock()
			return true, nil
		}
		batch := s.held
		s.held, s.heldBytes = nil, 0
		s.mu.Unlock()
		s.syncMu.Unlock()
		for _, m := range batch {
			if _, err := s.deliver(ctx, m); err != nil {
				return false, err
			}
		}
	}
}

// retryable reports whether a recovery call that failed with err may be
// made again: the transport was lost and the Conn is reconnecting (Call
// waits for it).
func retryable(s *Subscription, err error) bool {
	return errors.Is(err, ErrConnectionLost) && s.c.Err() == nil
}

// deliver hands m, an action, to the consumer unless its serverSeq is
// not after the last one delivered (it was paged already). It waits for
// room in the queue (half its bound: the reader keeps the rest). ok says
// whether m was delivered.
func (s *Subscription) deliver(ctx context.Context, m *Message) (ok bool, err error) {
	seq, found := actionSeq(m.Params)
	s.mu.Lock()
	last := s.lastApplied
	s.mu.Unlock()
	if !found || seq <= last {
		return false, nil
	}
	s.note(m.Method, m.Params, true)
	return true, s.q.pushWait(ctx, m, maxOrdinaryQueue/2)
}

// actionSeq returns an action envelope's serverSeq.
func actionSeq(params json.RawMessage) (uint64, bool) {
	if seq, ok := trailingServerSeq(params); ok {
		return seq, true
	}
	seq, _, ok := decodeSeq(rpc.MethodAction, params)
	return seq, ok
}

// resubscribe subscribes again (ordinary) for a fresh snapshot, delivered
// as a channel/snapshot message; the held actions it covers are dropped.
// epoch is the gap count when the result came: a later gap is the new
// subscription's.
func (s *Subscription) resubscribe(ctx context.Context) (epoch uint64, err error) {
	l, err := s.c.currentLink(ctx)
	if err != nil {
		return 0, err
	}
	var res rpc.SubscribeResult
	err = s.c.callOn(ctx, l, rpc.MethodSubscribe, rpc.SubscribeParams{Channel: s.Channel}, &res, func(r response) {
		if r.err == nil && r.lost == nil {
			// On the reader, before the new subscription's first action:
			// hold from here on (what came before is in the snapshot).
			s.mu.Lock()
			clear(s.held)
			s.held, s.heldBytes, s.overflow = nil, 0, false
			epoch = s.gapEpoch
			s.mu.Unlock()
		}
	})
	if err != nil {
		return 0, err
	}
	if res.Snapshot == nil {
		return 0, fmt.Errorf("the host answered a subscribe to %s without a snapshot", s.Channel)
	}
	p, err := json.Marshal(rpc.ChannelSnapshotParams{Channel: s.Channel, Snapshot: *res.Snapshot})
	if err != nil {
		return 0, err
	}
	s.note(rpc.MethodChannelSnapshot, p, true)
	raw := append(append([]byte(`{"jsonrpc":"2.0","method":"channel/snapshot","params":`), p...), '}')
	return epoch, s.q.pushWait(ctx, &Message{Method: rpc.MethodChannelSnapshot, Params: p, Raw: raw}, maxOrdinaryQueue/2)
}

// pushWait queues m once fewer than below messages wait (a pager, off
// the reader goroutine, waits for the consumer).
func (q *msgQueue) pushWait(ctx context.Context, m *Message, below int) error {
	for {
		q.mu.Lock()
		if q.closed != nil {
			err := q.closed
			q.mu.Unlock()
			return err
		}
		if len(q.items) < below {
			q.appendUnlock(m)
			return nil
		}
		q.mu.Unlock()
		select {
		case <-q.room:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// restaleOnSnapshot, for a reconnect's snapshot recovery, reports whether
// s is recovering from a gap; then its pager subscribes again (a snapshot
// between paged actions would not fit their order).
func (s *Subscription) restaleOnSnapshot() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sync == Current {
		return false
	}
	clear(s.held)
	s.held, s.heldBytes, s.overflow = nil, 0, true
	return true
}
