package client

import "strings"

// withoutQueries returns terminal output with the sequences that ask the
// terminal for an answer taken out: a device status or cursor position
// report (CSI 5n, 6n, ?6n), device attributes (CSI c, >c, =c), a mode
// report (CSI ? Ps $p), window reports (CSI 11t-21t), the terminal's
// version (CSI >q), colour queries (OSC 4, 10-19 with "?"), and
// DECRQSS (DCS $q). Output written again from a snapshot is history:
// the terminal it is shown on would answer each query as if asked now,
// and the answers ("1R", "2RR84;0;0c") would be typed into the remote
// program. Everything else passes unchanged.
func withoutQueries(s string) string {
	if strings.IndexByte(s, 0x1b) < 0 {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		if n := queryLen(s[i:]); n > 0 {
			i += n
			continue
		}
		b.WriteByte(s[i])
		i++
	}
	return b.String()
}

// queryLen is the length of the query sequence s starts with, 0 if none.
func queryLen(s string) int {
	if len(s) < 2 || s[0] != 0x1b {
		return 0
	}
	switch s[1] {
	case '[': // CSI params final
		j := 2
		for j < len(s) && s[j] >= 0x30 && s[j] <= 0x3f {
			j++
		}
		for j < len(s) && s[j] >= 0x20 && s[j] <= 0x2f {
			j++
		}
		if j >= len(s) {
			return 0
		}
		params, final := s[2:j], s[j]
		switch {
		case final == 'n' && (params == "5" || params == "6" || params == "?6"):
		case final == 'c' && (params == "" || params == "0" || params == ">" || params == ">0" || params == "=" || params == "=0"):
		case final == 'p' && strings.HasSuffix(params, "$"):
		case final == 'q' && (params == ">" || params == ">0"):
		case final == 't' && isWindowReport(params):
		default:
			return 0
		}
		return j + 1
	case ']': // OSC Ps ; ? BEL|ST
		end, term := strings.IndexByte(s, 0x07), 1
		if st := strings.Index(s, "\x1b\\"); st >= 0 && (end < 0 || st < end) {
			end, term = st, 2
		}
		if end < 0 {
			return 0
		}
		body := s[2:end]
		if strings.HasSuffix(body, ";?") && (strings.HasPrefix(body, "4;") || len(body) >= 4 && body[0] == '1' && body[1] >= '0' && body[1] <= '9' && body[2] == ';') {
			return end + term
		}
		return 0
	case 'P': // DCS $ q ... ST
		if !strings.HasPrefix(s[2:], "$q") {
			return 0
		}
		if st := strings.Index(s, "\x1b\\"); st >= 0 {
			return st + 2
		}
	}
	return 0
}

func isWindowReport(params string) bool {
	switch params {
	case "11", "13", "14", "15", "16", "18", "19", "20", "21":
		return true
	}
	return false
}
