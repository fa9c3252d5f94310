package delivery

import "unicode/utf8"

// UTF16Bytes is a size in UTF-16 bytes: 2 × the UTF-16 code units of JSON
// text (seed 000 "Measuring Size"). Every size, limit and counter of windowed
// delivery uses this unit, on every transport, including those that send
// UTF-8: "A" is 2, "é" is 2, "😀" is 4.
type UTF16Bytes int64

// asciiMask has the high bit of each byte of a 64-bit word set; a word of
// text ANDed with it is zero exactly when all eight bytes are ASCII.
const asciiMask = 0x8080808080808080

// Measure returns the size of UTF-8 text in UTF-16 bytes: 2 for each rune
// below U+10000, 4 for each rune at or above it (a surrogate pair). Each byte
// that is not part of a valid UTF-8 sequence counts as one U+FFFD (2), as the
// encoders in this package replace it. It does not allocate; ASCII is counted
// eight bytes at a time.
//
// A receiver measures the text it received, never a re-serialization.
func Measure(text []byte) UTF16Bytes { return measure(text) }

// MeasureString is Measure for a string.
func MeasureString(s string) UTF16Bytes { return measure(s) }

func measure[T ~string | ~[]byte](s T) UTF16Bytes {
	units := 0
	i := 0
	for i < len(s) {
		start := i
		for i+8 <= len(s) && load64(s, i)&asciiMask == 0 {
			i += 8
		}
		for i < len(s) && s[i] < utf8.RuneSelf {
			i++
		}
		units += i - start
		if i >= len(s) {
			break
		}
		r, size := decodeRune(s, i)
		if r >= 0x10000 {
			units += 2
		} else {
			units++
		}
		i += size
	}
	return UTF16Bytes(units) * 2
}

// load64 reads eight bytes of s starting at i, little-endian; the compiler
// merges the byte loads into one.
func load64[T ~string | ~[]byte](s T, i int) uint64 {
	_ = s[i+7]
	return uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
		uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
}

// decodeRune decodes the UTF-8 sequence at s[i:], like utf8.DecodeRune, for
// both strings and byte slices: an invalid or truncated sequence yields
// (utf8.RuneError, 1), so each bad byte becomes one U+FFFD.
func decodeRune[T ~string | ~[]byte](s T, i int) (rune, int) {
	n := len(s) - i
	b0 := s[i]
	switch {
	case b0 < 0x80:
		return rune(b0), 1
	case b0 < 0xC2 || b0 > 0xF4:
		return utf8.RuneError, 1
	case b0 < 0xE0:
		if n < 2 || !isCont(s[i+1]) {
			return utf8.RuneError, 1
		}
		return rune(b0&0x1F)<<6 | rune(s[i+1]&0x3F), 2
	case b0 < 0xF0:
		lo, hi := byte(0x80), byte(0xBF)
		if b0 == 0xE0 {
			lo = 0xA0 // overlong
		} else if b0 == 0xED {
			hi = 0x9F // surrogates U+D800..U+DFFF are not valid UTF-8
		}
		if n < 3 || s[i+1] < lo || s[i+1] > hi || !isCont(s[i+2]) {
			return utf8.RuneError, 1
		}
		return rune(b0&0x0F)<<12 | rune(s[i+1]&0x3F)<<6 | rune(s[i+2]&0x3F), 3
	default:
		lo, hi := byte(0x80), byte(0xBF)
		if b0 == 0xF0 {
			lo = 0x90 // overlong
		} else if b0 == 0xF4 {
			hi = 0x8F // above U+10FFFF
		}
		if n < 4 || s[i+1] < lo || s[i+1] > hi || !isCont(s[i+2]) || !isCont(s[i+3]) {
			return utf8.RuneError, 1
		}
		return rune(b0&0x07)<<18 | rune(s[i+1]&0x3F)<<12 | rune(s[i+2]&0x3F)<<6 | rune(s[i+3]&0x3F), 4
	}
}

func isCont(b byte) bool { return b&0xC0 == 0x80 }
