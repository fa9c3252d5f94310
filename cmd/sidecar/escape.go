package main

// escapeFilter recognises ssh's detach escape in typed input: '~' then '.'
// at the start of a line (after Enter, or as the very first input), and
// attach's "~t" (take the terminal over) while it shares one. "~~"
// sends one '~'. Other input passes through unchanged; a '~' at the start
// of a line is held back until the next byte shows what it is.
type escapeFilter struct {
	midLine bool // false at the start of a line
	tilde   bool // a line-start '~' is held back
	// takeOver, when set, is called for "~t" at the start of a line: it
	// returns true when it acted on it (attach shares the terminal and
	// asks to take it over), and "~t" is then not sent; false (attach
	// holds the terminal) sends "~t" as typed.
	takeOver func() bool
}

// Filter returns the bytes to send and whether the detach escape was typed
// (bytes after it are dropped).
func (e *escapeFilter) Filter(in []byte) (out []byte, detach bool) {
	out = make([]byte, 0, len(in)+1)
	for _, b := range in {
		if e.tilde {
			e.tilde = false
			switch b {
			case '.':
				return out, true
			case '~':
				out = append(out, '~')
				e.midLine = true
				continue
			case 't':
				if e.takeOver != nil && e.takeOver() {
					continue // still at the start of a line
				}
				out = append(out, '~')
				e.midLine = true
			default:
				out = append(out, '~')
				e.midLine = true
			}
		}
		if !e.midLine && b == '~' {
			e.tilde = true
			continue
		}
		out = append(out, b)
		e.midLine = !(b == '\r' || b == '\n')
	}
	return out, false
}
