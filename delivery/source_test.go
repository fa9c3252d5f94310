package delivery_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sidecar-dev/sidecar/delivery"
)

// reverseForm is a TextForm whose binary form is a message's text
// reversed (any reversible mapping will do for the Scheduler, which never
// looks inside either form).
type reverseForm struct{}

func (reverseForm) AppendText(dst, binary []byte) []byte {
	for i := len(binary) - 1; i >= 0; i-- {
		dst = append(dst, binary[i])
	}
	return dst
}

func reverse(s string) string { return string(reverseForm{}.AppendText(nil, []byte(s))) }

// binaryWriter records each write as "text:…" or "binary:…".
type binaryWriter struct {
	mu  sync.Mutex
	got []string
	n   chan struct{}
}

func newBinaryWriter() *binaryWriter { return &binaryWriter{n: make(chan struct{}, 64)} }

func (w *binaryWriter) WriteMessage(_ context.Context, text []byte) error {
	w.add("text:" + string(text))
	return nil
}

func (w *binaryWriter) WriteBinary(_ context.Context, p []byte) error {
	w.add("binary:" + string(p))
	return nil
}

func (w *binaryWriter) add(s string) {
	w.mu.Lock()
	w.got = append(w.got, s)
	w.mu.Unlock()
	w.n <- struct{}{}
}

func (w *binaryWriter) wait(t *testing.T, n int) []string {
	t.Helper()
	for range n {
		select {
		case <-w.n:
		case <-timeout():
			t.Fatalf("%d writes within the deadline, want %d", len(w.got), n)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.got...)
}

// formSource hands out messages with a binary form only.
type formSource struct {
	mu   sync.Mutex
	msgs []delivery.Message
	back []delivery.Message
}

func (s *formSource) Next() delivery.Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.msgs) == 0 {
		return delivery.Message{}
	}
	m := s.msgs[0]
	s.msgs = s.msgs[1:]
	return m
}

func (s *formSource) Recycle(m delivery.Message) {
	s.mu.Lock()
	s.back = append(s.back, m)
	s.mu.Unlock()
}

// TestBinaryForm: a message in binary form goes out as its bytes where
// the connection carries them (SchedulerConfig.Binary and a BinaryWriter),
// and as the text its Form rebuilds anywhere else; the window counts the
// size the message states either way (the text's), and a Recycler gets
// its binary form back, never a text the Scheduler built.
func TestBinaryForm(t *testing.T) {
	text := `{"jsonrpc":"2.0","method":"x/data","params":{"channel":"C","n":1}}`
	bin := reverse(text)
	size := delivery.Measure([]byte(text))
	for _, tc := range []struct {
		name   string
		binary bool
		want   string
	}{
		{"negotiated", true, "binary:" + bin},
		{"text only", false, "text:" + text},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := delivery.NewScheduler(delivery.SchedulerConfig{Binary: tc.binary, WriterReleases: true})
			src := &formSource{msgs: []delivery.Message{{Binary: []byte(bin), Form: reverseForm{}, Size: size}}}
			st := s.AddStream("C", delivery.Limits{WindowBytes: 4096, MaximumFrameBytes: 1024}, src)
			if st.Binary() != tc.binary {
				t.Fatalf("Stream.Binary() = %v", st.Binary())
			}
			w := newBinaryWriter()
			stop := run(t, s, w)
			got := w.wait(t, 1)
			if err := stop(); !errors.Is(err, context.Canceled) {
				t.Fatal(err)
			}
			if len(got) != 1 || got[0] != tc.want {
				t.Fatalf("wrote %q, want %q", got, tc.want)
			}
			if sent, _, _ := st.Window(); sent != size {
				t.Fatalf("sent %d UTF-16 bytes, want the text's %d", sent, size)
			}
			src.mu.Lock()
			defer src.mu.Unlock()
			if len(src.back) != 1 || string(src.back[0].Binary) != bin || src.back[0].Text != nil {
				t.Fatalf("recycled %+v, want the binary form alone", src.back)
			}
		})
	}
}

// TestBinaryFormFragments: a binary-form message larger than the peer's
// maximumFrameBytes goes out as channel/frame fragments of its text
// (seed 000 "Fragments" split the text), even where the connection
// carries binary forms; a message stating no size is measured on the
// text built.
//
// It runs in a synctest bubble: synctest.Wait returns once the writer
// has written every fragment and waits for more. (It waited for two
// writes and took what had been written by then, so a writer that had
// not written the last fragment yet failed it: 1 run in about 50 with
// -race on a busy machine.)
func TestBinaryFormFragments(t *testing.T) {
	synctest.Test(t, testBinaryFormFragments)
}

func testBinaryFormFragments(t *testing.T) {
	text := `{"jsonrpc":"2.0","method":"x/data","params":{"channel":"C","data":"` + strings.Repeat("a", 1500) + `"}}`
	s := delivery.NewScheduler(delivery.SchedulerConfig{Binary: true})
	src := &formSource{msgs: []delivery.Message{{Binary: []byte(reverse(text)), Form: reverseForm{}}}}
	st := s.AddStream("C", delivery.Limits{WindowBytes: 1 << 20, MaximumFrameBytes: 1024}, src)
	w := newBinaryWriter()
	stop := run(t, s, w)
	synctest.Wait()
	if err := stop(); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	w.mu.Lock()
	got := w.got
	w.mu.Unlock()
	if len(got) < 2 {
		t.Fatalf("%d writes, want the message in fragments", len(got))
	}
	var joined strings.Builder
	var frames delivery.UTF16Bytes
	for _, g := range got {
		f, ok := strings.CutPrefix(g, "text:")
		if !ok || !strings.Contains(f, `"method":"channel/frame"`) {
			t.Fatalf("wrote %.80q, want channel/frame text", g)
		}
		frames += delivery.Measure([]byte(f))
		joined.WriteString(fragmentData(t, f))
	}
	if joined.String() != text {
		t.Fatalf("fragments carry %.80q…, want the text", joined.String())
	}
	if sent, _, _ := st.Window(); sent != frames {
		t.Fatalf("sent %d UTF-16 bytes, want the fragments' %d", sent, frames)
	}
}

func timeout() <-chan time.Time { return time.After(waitLimit) }

// fragmentData returns the data string of a channel/frame text.
func fragmentData(t *testing.T, frame string) string {
	t.Helper()
	var f struct {
		Params struct {
			Data string `json:"data"`
		} `json:"params"`
	}
	if err := json.Unmarshal([]byte(frame), &f); err != nil {
		t.Fatalf("frame %.80q: %v", frame, err)
	}
	return f.Params.Data
}

// framedWriter is a binaryWriter that also writes from a message's frame
// room (delivery.FramedWriter), recorded as "framed:…" with the room.
type framedWriter struct{ *binaryWriter }

func (w framedWriter) WriteFramed(_ context.Context, framed []byte) error {
	w.add("framed:" + string(framed))
	return nil
}

// TestFramedForm: a binary form built behind FrameRoom bytes of room
// (Message.Framed) goes to a FramedWriter as the whole buffer, and to a
// writer that is only a BinaryWriter as the binary form; a Recycler gets
// the message back with its Framed buffer either way.
func TestFramedForm(t *testing.T) {
	text := `{"jsonrpc":"2.0","method":"x/data","params":{"channel":"C","n":1}}`
	bin := reverse(text)
	framed := append([]byte("ROOM-0123456"), bin...)
	if len(framed) != delivery.FrameRoom+len(bin) {
		t.Fatal("the fixture's room is not FrameRoom bytes")
	}
	for _, tc := range []struct {
		name   string
		framed bool
		want   string
	}{
		{"framed writer", true, "framed:" + string(framed)},
		{"binary writer", false, "binary:" + bin},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := delivery.NewScheduler(delivery.SchedulerConfig{Binary: true, WriterReleases: true})
			m := delivery.Message{Binary: framed[delivery.FrameRoom:], Framed: framed, Form: reverseForm{}, Size: delivery.Measure([]byte(text))}
			src := &formSource{msgs: []delivery.Message{m}}
			s.AddStream("C", delivery.Limits{WindowBytes: 4096, MaximumFrameBytes: 1024}, src)
			bw := newBinaryWriter()
			var w delivery.MessageWriter = bw
			if tc.framed {
				w = framedWriter{bw}
			}
			stop := run(t, s, w)
			got := bw.wait(t, 1)
			if err := stop(); !errors.Is(err, context.Canceled) {
				t.Fatal(err)
			}
			if len(got) != 1 || got[0] != tc.want {
				t.Fatalf("wrote %q, want %q", got, tc.want)
			}
			src.mu.Lock()
			defer src.mu.Unlock()
			if len(src.back) != 1 || string(src.back[0].Framed) != string(framed) || string(src.back[0].Binary) != bin {
				t.Fatalf("recycled %+v, want the message with its Framed buffer", src.back)
			}
		})
	}
}

// flushWriter is a framedWriter that is also a delivery.Flusher,
// recording each Flush as "flush".
type flushWriter struct{ framedWriter }

func (w flushWriter) Flush() error {
	w.add("flush")
	return nil
}

// TestFlushWhenIdle: a writer that holds what it writes (a Flusher) is
// flushed once the Scheduler has written every message ready and finds
// nothing more, not after each message, and not again while idle.
func TestFlushWhenIdle(t *testing.T) {
	text := `{"jsonrpc":"2.0","method":"x/data","params":{"channel":"C","n":1}}`
	var msgs []delivery.Message
	for i := range 3 {
		framed := append([]byte("ROOM-0123456"), reverse(text)...)
		framed[0] = byte('0' + i)
		msgs = append(msgs, delivery.Message{Binary: framed[delivery.FrameRoom:], Framed: framed, Form: reverseForm{}, Size: delivery.Measure([]byte(text))})
	}
	s := delivery.NewScheduler(delivery.SchedulerConfig{Binary: true, WriterReleases: true})
	s.AddStream("C", delivery.Limits{WindowBytes: 1 << 20, MaximumFrameBytes: 1024}, &formSource{msgs: msgs})
	w := flushWriter{framedWriter{newBinaryWriter()}}
	stop := run(t, s, w)
	w.wait(t, 4)
	if err := stop(); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	w.mu.Lock()
	got := append([]string(nil), w.got...)
	w.mu.Unlock()
	want := []string{"framed:0", "framed:1", "framed:2", "flush"}
	if len(got) != len(want) {
		t.Fatalf("wrote %d times, want %d: %.12q", len(got), len(want), got)
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Fatalf("write %d is %.12q, want %q", i, got[i], want[i])
		}
	}
}
