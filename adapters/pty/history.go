package pty

// History keeps the newest lines that scrolled off a terminal's primary
// screen, each as the VT text that draws it (appendLine) followed by
// CR LF, for a snapshot's content. It is bounded by a maximum number of
// bytes of that text: the oldest whole lines are dropped beyond it, so it
// never starts mid-line, mid-character or mid-sequence. It is not safe
// for concurrent use.
type History struct {
	max  int
	buf  []byte // the lines are buf[off:]
	off  int
	lens []int // the lengths of the lines, oldest first from lens[head]
	head int
}

// NewHistory returns a History that keeps at most maxBytes bytes
// (maxBytes <= 0 keeps nothing). Its memory grows with use, to at most
// about twice maxBytes (dropped bytes are reclaimed in bulk).
func NewHistory(maxBytes int) *History { return &History{max: max(maxBytes, 0)} }

// Push adds a line (its VT text, without a line end) as the newest,
// dropping the oldest lines beyond the bound. A line longer than the
// bound by itself is dropped. Push keeps a copy: the caller may reuse
// line.
func (h *History) Push(line []byte) {
	n := len(line) + 2
	if n > h.max {
		return
	}
	for h.Len()+n > h.max {
		h.off += h.lens[h.head]
		h.head++
	}
	if h.off > 0 && h.off >= len(h.buf)/2 {
		h.buf = h.buf[:copy(h.buf, h.buf[h.off:])]
		h.off = 0
	}
	if h.head > 0 && h.head >= len(h.lens)/2 {
		h.lens = h.lens[:copy(h.lens, h.lens[h.head:])]
		h.head = 0
	}
	h.buf = append(append(h.buf, line...), '\r', '\n')
	h.lens = append(h.lens, n)
}

// AppendTo appends the lines, oldest first, each ending in CR LF.
func (h *History) AppendTo(dst []byte) []byte { return append(dst, h.buf[h.off:]...) }

// Len returns the bytes kept; at most the maxBytes given to NewHistory.
func (h *History) Len() int { return len(h.buf) - h.off }

// Lines returns the number of lines kept.
func (h *History) Lines() int { return len(h.lens) - h.head }

// Clear drops every line.
func (h *History) Clear() {
	h.buf, h.off, h.lens, h.head = h.buf[:0], 0, h.lens[:0], 0
}
