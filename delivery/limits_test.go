package delivery

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestLimitsValidate(t *testing.T) {
	for _, tc := range []struct {
		l     Limits
		field string // "" means valid
		min   UTF16Bytes
	}{
		{Limits{512, 1024}, "", 0},
		{Limits{1, 1024}, "", 0},
		{Limits{262144, 16384}, "", 0},
		{Limits{0, 1024}, "windowBytes", 1},
		{Limits{-5, 1024}, "windowBytes", 1},
		{Limits{512, 1023}, "maximumFrameBytes", 1024},
		{Limits{512, 0}, "maximumFrameBytes", 1024},
	} {
		err := tc.l.Validate()
		if tc.field == "" {
			if err != nil {
				t.Errorf("%+v: unexpected %v", tc.l, err)
			}
			continue
		}
		var le *LimitsError
		if !errors.As(err, &le) || le.Field != tc.field || le.Min != tc.min {
			t.Errorf("%+v: got %v, want LimitsError on %s", tc.l, err, tc.field)
		}
	}
	err := Limits{512, 1000}.Validate()
	if got, want := err.Error(), "delivery: maximumFrameBytes 1000 < 1024"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

func TestLimitsJSON(t *testing.T) {
	// The member names of seed 000's flowControl.receive.
	var l Limits
	if err := json.Unmarshal([]byte(`{"windowBytes":262144,"maximumFrameBytes":16384}`), &l); err != nil {
		t.Fatal(err)
	}
	if l != (Limits{262144, 16384}) {
		t.Fatalf("got %+v", l)
	}
	b, _ := json.Marshal(Limits{512, 1024})
	if string(b) != `{"windowBytes":512,"maximumFrameBytes":1024}` {
		t.Fatalf("got %s", b)
	}
}

func TestNegotiate(t *testing.T) {
	host := Limits{WindowBytes: 512, MaximumFrameBytes: 1024}
	// Seed example: offer 262144/16384, the server accepts 512/1024.
	got, err := Negotiate(seedChannel, Limits{262144, 16384}, host)
	if err != nil || got != (Limits{512, 1024}) {
		t.Fatalf("Negotiate = %+v, %v; want {512 1024}", got, err)
	}
	// Never above the offer.
	got, err = Negotiate(seedChannel, Limits{100, 2000}, Limits{1 << 20, 1 << 14})
	if err != nil || got != (Limits{100, 2000}) {
		t.Fatalf("Negotiate = %+v, %v; want {100 2000}", got, err)
	}

	for _, tc := range []struct {
		name             string
		channel          string
		offered, hostMax Limits
		field            string // LimitsError field, if any
	}{
		{"offered window 0", seedChannel, Limits{0, 1024}, host, "windowBytes"},
		{"offered frame 1023", seedChannel, Limits{512, 1023}, host, "maximumFrameBytes"},
		{"host frame small", seedChannel, Limits{512, 1024}, Limits{512, 10}, "maximumFrameBytes"},
		{"long channel", "ahp-terminal:/" + strings.Repeat("x", 450), Limits{512, 1024}, host, ""},
		{"escaped channel", "ahp-terminal:/" + strings.Repeat("\x01", 80), Limits{512, 1024}, host, ""},
	} {
		_, err := Negotiate(tc.channel, tc.offered, tc.hostMax)
		if !errors.Is(err, ErrDecline) {
			t.Errorf("%s: err = %v, want ErrDecline", tc.name, err)
			continue
		}
		var le *LimitsError
		if tc.field != "" && (!errors.As(err, &le) || le.Field != tc.field) {
			t.Errorf("%s: err = %v, want LimitsError on %s", tc.name, err, tc.field)
		}
	}
}

func TestNegotiateFrameBoundary(t *testing.T) {
	// The longest channel for which a final fragment with one character of
	// any kind fits in 1024 bytes is accepted; one more byte of URI declines.
	lim := Limits{512, 1024}
	base := FrameOverhead("", true) + maxCharBytes // 2 per URI character beyond it
	n := int((lim.MaximumFrameBytes - base) / 2)
	ok := strings.Repeat("c", n)
	if MinFrameBudget(ok) != lim.MaximumFrameBytes {
		t.Fatalf("MinFrameBudget = %d, want %d", MinFrameBudget(ok), lim.MaximumFrameBytes)
	}
	if _, err := Negotiate(ok, lim, lim); err != nil {
		t.Fatalf("channel of %d: %v", n, err)
	}
	if _, err := Negotiate(ok+"c", lim, lim); !errors.Is(err, ErrDecline) {
		t.Fatalf("channel of %d: err = %v, want ErrDecline", n+1, err)
	}
	// And the accepted limit really carries a worst-case character.
	f := NewFragmenter(ok, []byte("\x01"))
	frame, size, final, err := f.Next(nil, lim.MaximumFrameBytes)
	if err != nil || !final || size != lim.MaximumFrameBytes || Measure(frame) != size {
		t.Fatalf("Next = size %d final %v err %v", size, final, err)
	}
}
