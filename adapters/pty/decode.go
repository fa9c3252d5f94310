package pty

import (
	"bytes"
	"strings"
	"unicode/utf8"
)

// MaxOSCBytes bounds how many bytes of an unterminated OSC sequence the
// OutputDecoder holds back (counted from its ESC, in raw bytes). A longer
// OSC is passed through unmodified, never stripped and never reported.
const MaxOSCBytes = 4096

// maxHeldBack is the most raw bytes an OutputDecoder holds between Feeds:
// a partial OSC (MaxOSCBytes) or an ESC, plus an incomplete UTF-8 sequence.
const maxHeldBack = MaxOSCBytes + utf8.UTFMax

const (
	esc = 0x1b
	bel = 0x07
	can = 0x18
	sub = 0x1a
)

type decState uint8

const (
	dGround  decState = iota
	dEsc              // after ESC (held back)
	dOSC              // inside a buffered OSC (ESC ] ...)
	dOSCEsc           // ESC inside a buffered OSC (maybe ST)
	dPass             // inside an overlong OSC, passing bytes through
	dPassEsc          // ESC inside an overlong OSC (held back)
)

// OutputDecoder turns raw PTY bytes into valid UTF-8 text for terminal/data.
// It is streaming: state carries across Feed calls, so the concatenated Text
// does not depend on how the input was split. It strips shell-integration
// sequences (OSC 133, OSC 633, OSC 7, OSC 1337 SetMark / CurrentDir /
// ShellIntegrationVersion / RemoteHost), reports OSC 0/2 titles and the
// OSC 7 working directory, and passes everything else through unchanged.
// The zero value is ready to use. It is not safe for concurrent use.
type OutputDecoder struct {
	state decState
	osc   []byte // the buffered OSC, from its ESC; at most MaxOSCBytes
	utf   [utf8.UTFMax]byte
	nutf  int // incomplete UTF-8 sequence held back (bytes)

	out    []byte
	titles []string
	cwd    string
}

// Output is what one Feed or Flush produced.
type Output struct {
	// Text is valid UTF-8: invalid bytes become U+FFFD; an incomplete UTF-8
	// sequence (or escape sequence) at the end of the input is held back
	// until the next Feed.
	Text string
	// Titles are the titles set by OSC 0 and OSC 2 sequences completed in
	// this call, in order. The OSC itself stays in Text.
	Titles []string
	// Cwd is the value of the last OSC 7 completed in this call, as sent
	// (normally a "file://host/path" URI); "" when there was none.
	Cwd string
}

// View is an Output whose Text is left in the decoder's own buffer
// (FeedView, FlushView): it is valid only until the decoder's next call,
// which reuses the buffer. A caller that keeps the text copies it.
type View struct {
	Text   []byte
	Titles []string
	Cwd    string
}

// maxKeptOut bounds the capacity of the output buffer a decoder keeps
// between calls: a rare huge output (a long run of U+FFFD) does not pin
// its buffer.
const maxKeptOut = 64 << 10

// Feed decodes the next raw bytes of output.
func (d *OutputDecoder) Feed(b []byte) Output {
	o := d.FeedView(b).output()
	d.resetOut() // copied: a large buffer is not kept until the next call
	return o
}

// FeedView is Feed without copying the text out: its Text is valid until
// the next call of any of the decoder's methods. The PTY reader uses it,
// as it encodes the text (and copies it into the scrollback) at once.
func (d *OutputDecoder) FeedView(b []byte) View {
	d.resetOut()
	d.feed(b)
	return d.take()
}

func (v View) output() Output { return Output{Text: string(v.Text), Titles: v.Titles, Cwd: v.Cwd} }

// resetOut empties the output buffer for the next call (whose caller is
// done with the previous View), dropping it when it grew large.
func (d *OutputDecoder) resetOut() {
	d.out = d.out[:0]
	if cap(d.out) > maxKeptOut {
		d.out = nil
	}
}

func (d *OutputDecoder) feed(b []byte) {
	for len(b) > 0 {
		switch d.state {
		case dGround:
			i := bytes.IndexByte(b, esc)
			if i < 0 {
				d.text(b)
				b = nil
				continue
			}
			d.text(b[:i])
			d.breakUTF8()
			d.state = dEsc
			b = b[i+1:]
		case dEsc:
			c := b[0]
			if c == ']' {
				d.osc = append(d.osc[:0], esc, ']')
				d.state = dOSC
				b = b[1:]
				continue
			}
			d.text([]byte{esc})
			d.state = dGround
			if c == esc {
				d.breakUTF8()
				d.state = dEsc
				b = b[1:]
			}
			// else reprocess c in ground
		case dOSC:
			c := b[0]
			switch c {
			case bel:
				d.osc = append(d.osc, c)
				d.finishOSC(len(d.osc) - 1)
				b = b[1:]
				continue
			case esc:
				d.osc = append(d.osc, c)
				d.state = dOSCEsc
			case can, sub:
				// Aborted: pass through as it was.
				d.text(d.osc)
				d.text([]byte{c})
				d.osc = d.osc[:0]
				d.state = dGround
			default:
				d.osc = append(d.osc, c)
			}
			b = b[1:]
			if d.state == dOSC && len(d.osc) >= MaxOSCBytes {
				d.text(d.osc)
				d.osc = d.osc[:0]
				d.state = dPass
			}
		case dOSCEsc:
			c := b[0]
			if c == '\\' {
				d.osc = append(d.osc, c)
				d.finishOSC(len(d.osc) - 2)
				b = b[1:]
				continue
			}
			// ESC not followed by '\' aborts the OSC and starts a new
			// escape sequence: pass the OSC through, reprocess c after ESC.
			d.text(d.osc[:len(d.osc)-1])
			d.osc = d.osc[:0]
			d.state = dEsc
		case dPass:
			i := 0
			for i < len(b) && b[i] != bel && b[i] != esc && b[i] != can && b[i] != sub {
				i++
			}
			d.text(b[:i])
			b = b[i:]
			if len(b) == 0 {
				continue
			}
			if b[0] == esc {
				d.state = dPassEsc
				b = b[1:]
				continue
			}
			d.text(b[:1])
			d.state = dGround
			b = b[1:]
		case dPassEsc:
			if b[0] == '\\' {
				d.text([]byte{esc, '\\'})
				d.state = dGround
				b = b[1:]
				continue
			}
			d.state = dEsc // reprocess b[0] after ESC
		}
	}
}

// Flush ends the stream: whatever is held back is emitted (an incomplete
// UTF-8 sequence as one U+FFFD, an unterminated escape sequence as its raw
// text, except an unterminated shell-integration OSC, which is dropped).
// The decoder is then back in its initial state.
func (d *OutputDecoder) Flush() Output {
	o := d.FlushView().output()
	d.resetOut()
	return o
}

// FlushView is Flush without copying the text out, like FeedView.
func (d *OutputDecoder) FlushView() View {
	d.resetOut()
	switch d.state {
	case dEsc, dPassEsc:
		d.text([]byte{esc})
	case dOSC, dOSCEsc:
		body := d.osc[2:]
		if d.state == dOSCEsc {
			body = body[:len(body)-1]
		}
		if !isShellIntegration(body) {
			d.text(d.osc)
		}
	}
	d.osc = d.osc[:0]
	d.state = dGround
	d.breakUTF8()
	return d.take()
}

// heldBack reports how many raw input bytes are held for the next Feed.
func (d *OutputDecoder) heldBack() int {
	n := d.nutf
	switch d.state {
	case dEsc, dPassEsc:
		n++
	case dOSC, dOSCEsc:
		n += len(d.osc)
	}
	return n
}

// take returns what the call produced; its Text stays d.out until the
// next call's resetOut.
func (d *OutputDecoder) take() View {
	v := View{Text: d.out, Titles: d.titles, Cwd: d.cwd}
	d.titles = nil
	d.cwd = ""
	return v
}

// finishOSC handles the complete OSC in d.osc whose terminator starts at
// index end.
func (d *OutputDecoder) finishOSC(end int) {
	body := d.osc[2:end]
	d.state = dGround
	ps, arg, _ := bytes.Cut(body, []byte{';'})
	switch string(ps) {
	case "0", "2":
		d.titles = append(d.titles, strings.ToValidUTF8(string(arg), "\uFFFD"))
	case "7":
		d.cwd = strings.ToValidUTF8(string(arg), "\uFFFD")
	}
	if !isShellIntegration(body) {
		d.text(d.osc)
	}
	d.osc = d.osc[:0]
}

// isShellIntegration reports whether an OSC body (between "ESC ]" and the
// terminator) is a shell-integration sequence that AHP requires stripped.
func isShellIntegration(body []byte) bool {
	ps, arg, _ := bytes.Cut(body, []byte{';'})
	switch string(ps) {
	case "133", "633", "7":
		return true
	case "1337":
		for _, p := range []string{"SetMark", "CurrentDir=", "ShellIntegrationVersion=", "RemoteHost="} {
			if bytes.HasPrefix(arg, []byte(p)) {
				return true
			}
		}
	}
	return false
}

// text appends raw bytes to the output, replacing invalid UTF-8 with U+FFFD
// one byte at a time and holding back an incomplete sequence at the end.
func (d *OutputDecoder) text(p []byte) {
	if len(p) == 0 {
		return
	}
	if d.nutf > 0 {
		// Rare: an incomplete sequence was held back; decode it joined
		// with p (one copy of p).
		joined := make([]byte, 0, d.nutf+len(p))
		joined = append(joined, d.utf[:d.nutf]...)
		p = append(joined, p...)
		d.nutf = 0
	}
	d.decode(p)
}

// decode appends p to the output and holds back an incomplete UTF-8
// sequence at its end.
func (d *OutputDecoder) decode(p []byte) {
	i := 0
	for i < len(p) {
		c := p[i]
		if c < utf8.RuneSelf {
			j := i + 1
			for j < len(p) && p[j] < utf8.RuneSelf {
				j++
			}
			d.out = append(d.out, p[i:j]...)
			i = j
			continue
		}
		if !utf8.FullRune(p[i:]) {
			d.nutf = copy(d.utf[:], p[i:])
			return
		}
		r, size := utf8.DecodeRune(p[i:])
		if r == utf8.RuneError && size == 1 {
			d.out = append(d.out, "\uFFFD"...)
		} else {
			d.out = append(d.out, p[i:i+size]...)
		}
		i += size
	}
}

// breakUTF8 ends an incomplete held-back UTF-8 sequence as one U+FFFD.
func (d *OutputDecoder) breakUTF8() {
	if d.nutf > 0 {
		d.out = append(d.out, "\uFFFD"...)
		d.nutf = 0
	}
}
