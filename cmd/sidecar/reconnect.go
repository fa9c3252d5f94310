package main

import (
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/sidecar-dev/sidecar/client"
)

// reconnectLine is what a client command says about a reconnection step
// (without the "sidecar: " prefix), "" for a step it does not show.
func reconnectLine(st client.ReconnectStatus) string {
	switch st.State {
	case client.Retrying:
		return fmt.Sprintf("connection lost, reconnecting (attempt %d, next in %s)", st.Attempt, roughly(st.Next))
	case client.Resumed:
		if st.UnknownFate > 0 {
			return fmt.Sprintf("resumed from a snapshot; %d keystrokes typed during the cut may be lost", st.UnknownFate)
		}
		return "resumed"
	}
	return ""
}

// roughly writes d for a person: "0.3 s" under a second, else whole
// seconds ("4 s").
func roughly(d time.Duration) string {
	if d < 950*time.Millisecond { // "1.0 s" would read as another unit than "1 s"
		return fmt.Sprintf("%.1f s", d.Seconds())
	}
	return fmt.Sprintf("%d s", int(d.Round(time.Second).Seconds()))
}

// statusOutput is the terminal's output and our status lines on one
// screen: output goes through Write; Status prints a line of ours on a
// line of its own, never inside an escape sequence or a UTF-8 character
// of the output (it waits for the output to leave one), and while no
// output came between, over our previous status line (one status line
// while reconnecting). Raw mode: lines end with "\r\n".
type statusOutput struct {
	mu      sync.Mutex
	out     io.Writer // the program's output
	status  io.Writer // where status lines go (the same terminal)
	esc     escState
	pending []string // status lines waiting for the output to leave a sequence
	last    bool     // the last thing written was a status line of ours
}

func newStatusOutput(out, status io.Writer) *statusOutput {
	return &statusOutput{out: out, status: status}
}

func (s *statusOutput) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	done := 0
	for done < len(p) {
		// Up to where the output leaves a sequence, when a status line
		// waits for that; else all of it.
		end := len(p)
		st := s.esc
		for i := done; i < len(p); i++ {
			st = st.next(p[i])
			if len(s.pending) > 0 && st == escGround {
				end = i + 1
				break
			}
		}
		n, err := s.out.Write(p[done:end])
		for _, b := range p[done : done+n] {
			s.esc = s.esc.next(b)
		}
		if n > 0 {
			s.last = false
		}
		done += n
		if err != nil {
			return done, err
		}
		if s.esc == escGround && len(s.pending) > 0 {
			for _, l := range s.pending {
				s.print(l)
			}
			s.pending = nil
		}
	}
	return done, nil
}

// Status prints line (held while the output is inside a sequence).
func (s *statusOutput) Status(line string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.esc != escGround {
		s.pending = append(s.pending, line)
		return
	}
	s.print(line)
}

func (s *statusOutput) print(line string) {
	if s.last {
		// Over our previous status line: up one, clear it.
		fmt.Fprintf(s.status, "\x1b[1A\r\x1b[2Ksidecar: %s\r\n", line)
	} else {
		fmt.Fprintf(s.status, "\r\nsidecar: %s\r\n", line)
	}
	s.last = true
}

// escState tracks where a byte stream is in terms of escape sequences
// (ECMA-48: CSI, OSC and the other strings) and UTF-8 characters, so
// that our own lines go in only between them.
type escState int

const (
	escGround    escState = iota
	escEsc                // after ESC
	escCSI                // in ESC [ ... final
	escString             // in OSC/DCS/SOS/PM/APC, up to BEL or ST
	escStringEsc          // ESC inside a string (ST is ESC \)
	escUTF8               // inside a UTF-8 character (one more byte)
	escUTF8x2             // two more
	escUTF8x3             // three more
)

func (e escState) next(b byte) escState {
	switch e {
	case escEsc:
		switch b {
		case '[':
			return escCSI
		case ']', 'P', 'X', '^', '_':
			return escString
		case 0x1b:
			return escEsc
		}
		if b >= 0x20 && b <= 0x2f {
			return escEsc // intermediate bytes (ESC ( B): the final follows
		}
		return escGround
	case escCSI:
		if b >= 0x40 && b <= 0x7e {
			return escGround
		}
		return escCSI
	case escString:
		switch b {
		case 0x07:
			return escGround
		case 0x1b:
			return escStringEsc
		}
		return escString
	case escStringEsc:
		if b == '\\' {
			return escGround
		}
		return escString
	case escUTF8, escUTF8x2, escUTF8x3:
		if b&0xc0 != 0x80 {
			return escGround.next(b) // not a continuation: a new start
		}
		switch e {
		case escUTF8x3:
			return escUTF8x2
		case escUTF8x2:
			return escUTF8
		}
		return escGround
	}
	switch {
	case b == 0x1b:
		return escEsc
	case b&0xe0 == 0xc0:
		return escUTF8
	case b&0xf0 == 0xe0:
		return escUTF8x2
	case b&0xf8 == 0xf0:
		return escUTF8x3
	}
	return escGround
}
