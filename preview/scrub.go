package preview

import (
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"net/url"
	"strings"
)

// containsToken reports whether v contains tok anywhere, in time that
// depends on len(v) and len(tok) only: every window of v is compared
// with subtle.ConstantTimeCompare and the results are or-ed, so where
// (and whether) a match lies, and how much of tok a near miss shares,
// take no time to tell. An empty tok is never contained.
func containsToken(v, tok string) bool {
	if tok == "" || len(v) < len(tok) {
		return false
	}
	t := []byte(tok)
	b := []byte(v)
	found := 0
	for i := 0; i+len(t) <= len(b); i++ {
		found |= subtle.ConstantTimeCompare(b[i:i+len(t)], t)
	}
	return found == 1
}

// carriesToken reports whether the header value v carries tok: literally
// (Bearer, a bare token, any scheme or spacing), or inside Basic
// credentials (base64 of user:password).
func carriesToken(v, tok string) bool {
	if containsToken(v, tok) {
		return true
	}
	scheme, cred, ok := strings.Cut(strings.TrimSpace(v), " ")
	if ok && strings.EqualFold(scheme, "Basic") {
		if dec, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred)); err == nil {
			return containsToken(string(dec), tok)
		}
	}
	return false
}

// scrubToken takes the daemon's token off a request bound for an app:
// every header value that carries it (Authorization, Proxy-Authorization
// and any other, each value of a repeated header on its own), every
// cookie whose value contains it (the others kept), and every query
// parameter whose value, decoded, contains it (the others kept byte for
// byte). An app's own ?token= or Authorization with other values passes.
// docs/operations.md "Port preview": neither the cookie nor the token
// reaches the app.
func scrubToken(h http.Header, u *url.URL, tok string) {
	if tok == "" {
		return
	}
	for k, vs := range h {
		if k == "Cookie" {
			continue
		}
		var kept []string
		for _, v := range vs {
			if !carriesToken(v, tok) {
				kept = append(kept, v)
			}
		}
		if len(kept) == 0 {
			delete(h, k)
		} else if len(kept) != len(vs) {
			h[k] = kept
		}
	}
	stripCookies(h, func(name, value string) bool { return containsToken(name+"="+value, tok) })
	if u.RawQuery != "" {
		var kept []string
		changed := false
		for part := range strings.SplitSeq(u.RawQuery, "&") {
			k, v, _ := strings.Cut(part, "=")
			dk, err1 := url.QueryUnescape(k)
			dv, err2 := url.QueryUnescape(v)
			if containsToken(part, tok) || (err1 == nil && containsToken(dk, tok)) || (err2 == nil && containsToken(dv, tok)) {
				changed = true
				continue
			}
			kept = append(kept, part)
		}
		if changed {
			u.RawQuery = strings.Join(kept, "&")
		}
	}
}
