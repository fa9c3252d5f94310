package delivery

import (
	"errors"
	"testing"

	"pgregory.net/rapid"
)

var seedLimits = Limits{WindowBytes: 512, MaximumFrameBytes: 1024}

func mustDebit(t *testing.T, w *SendWindow, n UTF16Bytes) {
	t.Helper()
	if err := w.Debit(n); err != nil {
		t.Fatalf("Debit(%d): %v", n, err)
	}
}

func mustCredit(t *testing.T, w *SendWindow, v UTF16Bytes, wantAdvanced bool) {
	t.Helper()
	adv, err := w.Credit(v)
	if err != nil || adv != wantAdvanced {
		t.Fatalf("Credit(%d) = %v, %v; want %v, nil", v, adv, err, wantAdvanced)
	}
}

func wantViolation(t *testing.T, err error, kind ViolationKind, got, limit UTF16Bytes) {
	t.Helper()
	var v *ViolationError
	if !errors.As(err, &v) || v.Kind != kind || v.Got != got || v.Limit != limit {
		t.Fatalf("err = %#v, want %v got %d limit %d", err, kind, got, limit)
	}
}

// The seed 000 walk: snapshot 520, credit 520, action 284, credit 804.
func TestSendWindowSeedWalk(t *testing.T) {
	w := NewSendWindow(seedLimits)
	if !w.CanStart() || w.Remaining() != 512 {
		t.Fatalf("fresh window: CanStart %v Remaining %d", w.CanStart(), w.Remaining())
	}
	mustDebit(t, w, 520) // larger than the window, allowed: the window was empty
	if w.CanStart() || w.Outstanding() != 520 || w.Remaining() != -8 {
		t.Fatalf("after snapshot: CanStart %v Outstanding %d Remaining %d", w.CanStart(), w.Outstanding(), w.Remaining())
	}
	wantViolation(t, w.Debit(284), SendOnFullWindow, 520, 512)
	if w.Sent() != 520 {
		t.Fatalf("refused Debit changed Sent to %d", w.Sent())
	}
	mustCredit(t, w, 520, true)
	if !w.CanStart() || w.Outstanding() != 0 {
		t.Fatalf("after credit 520: CanStart %v Outstanding %d", w.CanStart(), w.Outstanding())
	}
	mustDebit(t, w, 284)
	mustCredit(t, w, 804, true)
	if w.Sent() != 804 || w.Consumed() != 804 || w.Outstanding() != 0 {
		t.Fatalf("end: sent %d consumed %d", w.Sent(), w.Consumed())
	}

	// The fragmented variant: 360 + 374 = 734 instead of 284, credit 1254.
	w = NewSendWindow(seedLimits)
	mustDebit(t, w, 520)
	mustCredit(t, w, 520, true)
	mustDebit(t, w, 360)
	if !w.CanStart() || w.Remaining() != 152 {
		t.Fatalf("after first fragment: CanStart %v Remaining %d", w.CanStart(), w.Remaining())
	}
	mustDebit(t, w, 374) // goes past the window: the last fragment may
	if w.CanStart() || w.Outstanding() != 734 {
		t.Fatalf("after last fragment: Outstanding %d", w.Outstanding())
	}
	mustCredit(t, w, 1254, true)
	if w.Outstanding() != 0 || w.Sent() != 1254 {
		t.Fatalf("end: sent %d outstanding %d", w.Sent(), w.Outstanding())
	}
}

// Seed: "if 500 bytes of a 512-byte window are outstanding, the sender can
// still send a 284-byte action whole".
func TestSendWindowOvershootOneMessage(t *testing.T) {
	w := NewSendWindow(seedLimits)
	mustDebit(t, w, 500)
	mustDebit(t, w, 284)
	if w.Outstanding() != 784 || w.CanStart() {
		t.Fatalf("outstanding %d", w.Outstanding())
	}
	if w.Outstanding() >= seedLimits.WindowBytes+seedLimits.MaximumFrameBytes {
		t.Fatal("outstanding reached window + maximumFrameBytes")
	}
}

func TestSendWindowTable(t *testing.T) {
	type step struct {
		debit, credit UTF16Bytes // one of them
		adv           bool
		kind          ViolationKind // 0: no error
		got, limit    UTF16Bytes
	}
	for _, tc := range []struct {
		name  string
		steps []step
		sent  UTF16Bytes
		cons  UTF16Bytes
	}{
		{"stale credit ignored", []step{
			{debit: 400}, {credit: 300, adv: true}, {credit: 300}, {credit: 200}, {credit: 0}, {credit: -1},
		}, 400, 300},
		{"credit beyond sent", []step{
			{debit: 520}, {credit: 520, adv: true}, {debit: 284},
			{credit: 900, kind: CreditBeyondSent, got: 900, limit: 804},
		}, 804, 520},
		{"credit mid fragment", []step{
			{debit: 360}, {credit: 7, adv: true}, {credit: 360, adv: true},
		}, 360, 360},
		{"frame too large", []step{
			{debit: 1025, kind: FrameTooLarge, got: 1025, limit: 1024}, {debit: 1024},
		}, 1024, 0},
		{"invalid size", []step{
			{debit: -3, kind: InvalidSize, got: -3},
		}, 0, 0},
		{"send on full window", []step{
			{debit: 511}, {debit: 1}, {debit: 1, kind: SendOnFullWindow, got: 512, limit: 512},
		}, 512, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := NewSendWindow(seedLimits)
			for i, s := range tc.steps {
				var err error
				adv := false
				if s.debit != 0 {
					err = w.Debit(s.debit)
				} else {
					adv, err = w.Credit(s.credit)
				}
				if adv != s.adv {
					t.Fatalf("step %d: advanced %v", i, adv)
				}
				if s.kind == 0 {
					if err != nil {
						t.Fatalf("step %d: %v", i, err)
					}
					continue
				}
				wantViolation(t, err, s.kind, s.got, s.limit)
			}
			if w.Sent() != tc.sent || w.Consumed() != tc.cons {
				t.Fatalf("sent %d consumed %d, want %d %d", w.Sent(), w.Consumed(), tc.sent, tc.cons)
			}
		})
	}
}

func TestViolationErrorText(t *testing.T) {
	w := NewSendWindow(seedLimits)
	mustDebit(t, w, 520)
	mustCredit(t, w, 520, true)
	mustDebit(t, w, 284)
	_, err := w.Credit(900)
	var v *ViolationError
	if !errors.As(err, &v) {
		t.Fatal(err)
	}
	v.Channel = seedChannel
	if got, want := err.Error(), "delivery: credit beyond sent on ahp-terminal:/t1: consumedBytes 900 > sent 804"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	for _, tc := range []struct {
		e    ViolationError
		want string
	}{
		{ViolationError{Kind: FrameTooLarge, Got: 2000, Limit: 1024}, "delivery: frame too large: size 2000 > maximumFrameBytes 1024"},
		{ViolationError{Kind: WindowExceeded, Channel: "c", Got: 600, Limit: 512}, "delivery: window exceeded on c: outstanding 600 >= windowBytes 512"},
		{ViolationError{Kind: EmptyFragment, Channel: "c"}, "delivery: empty fragment on c"},
		{ViolationError{Kind: MessageTooLarge, Got: 65, Limit: 64}, "delivery: message too large: joined 65 > maximum 64"},
		{ViolationError{Kind: FragmentInterleaved}, "delivery: fragment interleaved"},
		{ViolationError{Kind: 99}, "delivery: ViolationKind(99)"},
	} {
		if got := tc.e.Error(); got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
	}
}

func TestSendWindowSetLimitsKeepsCounters(t *testing.T) {
	w := NewSendWindow(seedLimits)
	mustDebit(t, w, 520)
	mustCredit(t, w, 100, true)
	w.SetLimits(Limits{WindowBytes: 4096, MaximumFrameBytes: 2048})
	if w.Sent() != 520 || w.Consumed() != 100 || w.Outstanding() != 420 {
		t.Fatalf("counters changed: sent %d consumed %d", w.Sent(), w.Consumed())
	}
	if !w.CanStart() || w.Remaining() != 4096-420 || w.Limits().MaximumFrameBytes != 2048 {
		t.Fatalf("new limits not applied: %+v remaining %d", w.Limits(), w.Remaining())
	}
	mustDebit(t, w, 2000) // allowed under the new frame limit
	mustCredit(t, w, 100, false)
	mustCredit(t, w, 2520, true)
}

func TestRecvWindowSeedWalk(t *testing.T) {
	r := NewRecvWindow(seedLimits)
	if err := r.Receive(520); err != nil {
		t.Fatal(err)
	}
	// The snapshot filled the window: more data before credit is a violation.
	wantViolation(t, r.Receive(284), WindowExceeded, 520, 512)
	if v, ok := r.CreditDue(); ok {
		t.Fatalf("credit due %d before any release", v)
	}
	r.Release(520)
	v, ok := r.CreditDue()
	if !ok || v != 520 {
		t.Fatalf("CreditDue = %d %v, want 520", v, ok)
	}
	// Until the credit is sent, the sender cannot know of it.
	wantViolation(t, r.Receive(284), WindowExceeded, 520, 512)
	r.MarkCredited(520)
	if _, ok := r.CreditDue(); ok {
		t.Fatal("credit due again after MarkCredited")
	}
	// Fragmented action: 360 then 374, released per fragment.
	if err := r.Receive(360); err != nil {
		t.Fatal(err)
	}
	if err := r.Receive(374); err != nil {
		t.Fatal(err)
	}
	r.Release(360)
	if v, ok := r.CreditDue(); !ok || v != 880 { // 360 >= 512/4
		t.Fatalf("CreditDue = %d %v, want 880", v, ok)
	}
	r.Release(374)
	if v, ok := r.CreditDue(); !ok || v != 1254 {
		t.Fatalf("CreditDue = %d %v, want 1254", v, ok)
	}
	r.MarkCredited(1254)
	if r.Received() != 1254 || r.Released() != 1254 {
		t.Fatalf("received %d released %d", r.Received(), r.Released())
	}
	if err := appendCreditCheck(1254); err != nil {
		t.Fatal(err)
	}
}

// appendCreditCheck compares the credit text with the seed's.
func appendCreditCheck(v UTF16Bytes) error {
	want := `{"jsonrpc":"2.0","method":"channel/credit","params":{"channel":"ahp-terminal:/t1","consumedBytes":` +
		map[UTF16Bytes]string{520: "520", 804: "804", 1254: "1254"}[v] + `}}`
	if got := string(AppendCredit(nil, seedChannel, v)); got != want {
		return errors.New("AppendCredit = " + got + ", want " + want)
	}
	return nil
}

func TestAppendCreditSeed(t *testing.T) {
	for _, v := range []UTF16Bytes{520, 804, 1254} {
		if err := appendCreditCheck(v); err != nil {
			t.Fatal(err)
		}
	}
}

func TestRecvWindowTable(t *testing.T) {
	r := NewRecvWindow(seedLimits)
	wantViolation(t, r.Receive(1025), FrameTooLarge, 1025, 1024)
	wantViolation(t, r.Receive(0), InvalidSize, 0, 0)
	if r.Received() != 0 {
		t.Fatalf("refused Receive counted: %d", r.Received())
	}
	if err := r.Receive(100); err != nil {
		t.Fatal(err)
	}
	// Release clamps to received and ignores non-positive values.
	r.Release(-5)
	r.Release(1000)
	if r.Released() != 100 {
		t.Fatalf("released %d, want 100", r.Released())
	}
	// MarkCredited clamps to released and never goes back.
	r.MarkCredited(5000)
	if _, ok := r.CreditDue(); ok {
		t.Fatal("credit due after clamped MarkCredited")
	}
	r.MarkCredited(10)
	if r.credited != 100 {
		t.Fatalf("credited %d, want 100", r.credited)
	}

	// Coalescing: below WindowBytes/16 and not caught up, no credit.
	r = NewRecvWindow(Limits{WindowBytes: 1600, MaximumFrameBytes: 1024})
	if err := r.Receive(1000); err != nil {
		t.Fatal(err)
	}
	for i := range 99 {
		r.Release(1)
		if v, ok := r.CreditDue(); ok {
			t.Fatalf("credit %d due after %d single bytes", v, i+1)
		}
	}
	r.Release(1)
	if v, ok := r.CreditDue(); !ok || v != 100 {
		t.Fatalf("CreditDue = %d %v, want 100", v, ok)
	}

	// SetLimits keeps counters.
	r.MarkCredited(100)
	r.SetLimits(Limits{WindowBytes: 4000, MaximumFrameBytes: 4000})
	if r.Received() != 1000 || r.Released() != 100 {
		t.Fatal("SetLimits changed counters")
	}
	if err := r.Receive(3000); err != nil {
		t.Fatal(err)
	}
}

// A sender and a receiver joined by in-order links that carry data and
// credit with arbitrary delay: the receiver never sees a violation, the
// sender's outstanding stays below window + maximumFrameBytes, consumed
// never decreases, and the sender always gets going again.
func TestWindowsPipelineProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		lim := Limits{
			WindowBytes:       UTF16Bytes(rapid.IntRange(1, 5000).Draw(t, "window")),
			MaximumFrameBytes: UTF16Bytes(rapid.IntRange(1024, 4096).Draw(t, "maxFrame")),
		}
		s, r := NewSendWindow(lim), NewRecvWindow(lim)
		var data, credits []UTF16Bytes // in flight
		var lastConsumed UTF16Bytes
		steps := rapid.IntRange(1, 300).Draw(t, "steps")
		for range steps {
			switch rapid.IntRange(0, 4).Draw(t, "op") {
			case 0: // send
				n := UTF16Bytes(rapid.IntRange(1, int(lim.MaximumFrameBytes)).Draw(t, "n"))
				can := s.CanStart()
				err := s.Debit(n)
				if can != (err == nil) {
					t.Fatalf("CanStart %v but Debit err %v", can, err)
				}
				if err == nil {
					data = append(data, n)
				}
			case 1: // deliver data
				if len(data) > 0 {
					if err := r.Receive(data[0]); err != nil {
						t.Fatalf("Receive(%d): %v", data[0], err)
					}
					data = data[1:]
				}
			case 2: // consumer releases
				r.Release(UTF16Bytes(rapid.IntRange(0, 3000).Draw(t, "release")))
			case 3: // credit goes out if due
				if v, ok := r.CreditDue(); ok {
					r.MarkCredited(v)
					credits = append(credits, v)
				}
			case 4: // deliver credit
				if len(credits) > 0 {
					if _, err := s.Credit(credits[0]); err != nil {
						t.Fatalf("Credit(%d): %v", credits[0], err)
					}
					credits = credits[1:]
				}
			}
			if s.Outstanding() >= lim.WindowBytes+lim.MaximumFrameBytes {
				t.Fatalf("outstanding %d >= %d", s.Outstanding(), lim.WindowBytes+lim.MaximumFrameBytes)
			}
			if s.Consumed() < lastConsumed {
				t.Fatalf("consumed went back %d -> %d", lastConsumed, s.Consumed())
			}
			lastConsumed = s.Consumed()
		}
		// Liveness: deliver everything, release everything, return credit.
		for _, n := range data {
			if err := r.Receive(n); err != nil {
				t.Fatal(err)
			}
		}
		r.Release(r.Received())
		if v, ok := r.CreditDue(); ok {
			r.MarkCredited(v)
			credits = append(credits, v)
		}
		for _, v := range credits {
			if _, err := s.Credit(v); err != nil {
				t.Fatal(err)
			}
		}
		if s.Outstanding() != 0 || !s.CanStart() {
			t.Fatalf("sender stuck: outstanding %d", s.Outstanding())
		}
	})
}

// Random sends and credits on a SendWindow alone, credits arbitrary (stale,
// exact, or beyond sent).
func TestSendWindowProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		lim := Limits{
			WindowBytes:       UTF16Bytes(rapid.IntRange(1, 5000).Draw(t, "window")),
			MaximumFrameBytes: UTF16Bytes(rapid.IntRange(1024, 4096).Draw(t, "maxFrame")),
		}
		w := NewSendWindow(lim)
		for range rapid.IntRange(1, 200).Draw(t, "steps") {
			prevSent, prevCons := w.Sent(), w.Consumed()
			if rapid.Bool().Draw(t, "send") {
				n := UTF16Bytes(rapid.IntRange(-10, int(lim.MaximumFrameBytes)+10).Draw(t, "n"))
				can := w.CanStart()
				err := w.Debit(n)
				if ok := can && n > 0 && n <= lim.MaximumFrameBytes; ok != (err == nil) {
					t.Fatalf("Debit(%d) with CanStart %v: %v", n, can, err)
				}
			} else {
				v := UTF16Bytes(rapid.IntRange(-10, int(w.Sent())+100).Draw(t, "credit"))
				adv, err := w.Credit(v)
				switch {
				case v <= prevCons:
					if adv || err != nil {
						t.Fatalf("stale Credit(%d) = %v %v", v, adv, err)
					}
				case v > prevSent:
					wantViolationR(t, err, CreditBeyondSent, v, prevSent)
				default:
					if !adv || err != nil || w.Consumed() != v {
						t.Fatalf("Credit(%d) = %v %v", v, adv, err)
					}
				}
			}
			if w.Consumed() < prevCons || w.Sent() < prevSent || w.Consumed() > w.Sent() {
				t.Fatalf("counters: sent %d->%d consumed %d->%d", prevSent, w.Sent(), prevCons, w.Consumed())
			}
			if w.Outstanding() >= lim.WindowBytes+lim.MaximumFrameBytes {
				t.Fatalf("outstanding %d", w.Outstanding())
			}
		}
	})
}

func wantViolationR(t *rapid.T, err error, kind ViolationKind, got, limit UTF16Bytes) {
	var v *ViolationError
	if !errors.As(err, &v) || v.Kind != kind || v.Got != got || v.Limit != limit {
		t.Fatalf("err = %#v, want %v got %d limit %d", err, kind, got, limit)
	}
}
