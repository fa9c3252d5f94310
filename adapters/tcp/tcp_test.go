package tcp

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sidecar-dev/sidecar/delivery"
	"github.com/sidecar-dev/sidecar/rpc"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestAppendDataMatchesJSON: the hand-built tcp/data is exactly what
// encoding the notification would give, for odd channel names too.
func TestAppendDataMatchesJSON(t *testing.T) {
	for _, ch := range []string{"ahp-tcp:/t1", `ahp-tcp:/q"uo\te`, "ahp-tcp:/é😀<&>"} {
		e := NewEncoder(ch)
		for _, payload := range [][]byte{{0}, []byte("Hello"), bytes.Repeat([]byte{0xff, 0, 'x'}, 1000)} {
			off := DecodedOffset(123456789)
			got := e.AppendData(nil, off, payload)
			want, _ := rpc.Notification(rpc.MethodTCPData, DataParams{Channel: ch, Offset: &off, Data: b64(payload)})
			if !bytes.Equal(got, want) {
				t.Fatalf("AppendData = %s\nwant        %s", got, want)
			}
			if e.DataLen(off, len(payload)) != len(got) {
				t.Errorf("DataLen = %d, want %d", e.DataLen(off, len(payload)), len(got))
			}
		}
	}
	e := NewEncoder("ahp-tcp:/t1")
	if got, want := string(e.EOF(5)), `{"jsonrpc":"2.0","method":"tcp/eof","params":{"channel":"ahp-tcp:/t1","offset":5}}`; got != want {
		t.Errorf("EOF = %s, want %s", got, want)
	}
	if got, want := string(e.Reset()), `{"jsonrpc":"2.0","method":"tcp/reset","params":{"channel":"ahp-tcp:/t1"}}`; got != want {
		t.Errorf("Reset = %s, want %s", got, want)
	}
}

func b64(p []byte) string {
	var e = NewEncoder("x")
	text := e.AppendData(nil, 0, p)
	var n struct {
		Params DataParams `json:"params"`
	}
	_ = json.Unmarshal(text, &n)
	return n.Params.Data
}

// TestMaxPayloadExact: MaxPayload bytes fit the frame whole, one more
// byte does not, for every frame size around the minimum and the default,
// at offsets of every length.
func TestMaxPayloadExact(t *testing.T) {
	for _, ch := range []string{"ahp-tcp:/t1", "ahp-tcp:/" + strings.Repeat("é", 128)} {
		e := NewEncoder(ch)
		for _, off := range []DecodedOffset{0, 9, 10, 99999, 1 << 40, ^DecodedOffset(0)} {
			for frame := delivery.UTF16Bytes(1024); frame <= 1100; frame++ {
				checkMax(t, e, off, frame)
			}
			for _, frame := range []delivery.UTF16Bytes{16384, 16385, 16386, 16387, 262144, 524288} {
				checkMax(t, e, off, frame)
			}
		}
	}
}

func checkMax(t *testing.T, e *Encoder, off DecodedOffset, frame delivery.UTF16Bytes) {
	t.Helper()
	n := e.MaxPayload(off, frame)
	if n <= 0 {
		t.Fatalf("MaxPayload(%d, %d) = %d", off, frame, n)
	}
	if s := delivery.Measure(e.AppendData(nil, off, make([]byte, n))); s > frame {
		t.Fatalf("%d bytes at %d measure %d > frame %d", n, off, s, frame)
	}
	if s := delivery.Measure(e.AppendData(nil, off, make([]byte, n+1))); s <= frame {
		t.Fatalf("%d bytes at %d still fit frame %d (%d): MaxPayload is not the maximum", n+1, off, frame, s)
	}
}

func TestParseData(t *testing.T) {
	off := func(v DecodedOffset) *DecodedOffset { return &v }
	for _, c := range []struct {
		name   string
		params string
		off    *DecodedOffset
		data   string
		bad    bool
	}{
		{"plain", `{"channel":"ahp-tcp:/t1","offset":7,"data":"SGVsbG8="}`, off(7), "Hello", false},
		{"no offset", `{"channel":"ahp-tcp:/t1","data":"SGVsbG8="}`, nil, "Hello", false},
		{"reordered, spaces", ` { "data" : "QQ==" , "offset" : 0 , "channel" : "c" } `, off(0), "A", false},
		{"escaped slash (slow path)", `{"channel":"c","data":"\/w=="}`, nil, "\xff", false},
		{"unknown member (slow path)", `{"channel":"c","data":"QQ==","_meta":{"x":[1]}}`, nil, "A", false},
		{"empty data", `{"channel":"c","data":""}`, nil, "", true},
		{"no data", `{"channel":"c"}`, nil, "", true},
		{"unpadded", `{"channel":"c","data":"QQ"}`, nil, "", true},
		{"non-zero pad bits", `{"channel":"c","data":"QR=="}`, nil, "", true},
		{"line break", `{"channel":"c","data":"SGVs\nbG8="}`, nil, "", true},
		{"url alphabet", `{"channel":"c","data":"_w=="}`, nil, "", true},
		{"not an object", `"x"`, nil, "", true},
		{"negative offset", `{"channel":"c","offset":-1,"data":"QQ=="}`, nil, "", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, data, err := ParseData(json.RawMessage(c.params))
			if c.bad {
				if err == nil || !errors.Is(err, ErrProtocol) {
					t.Fatalf("ParseData = %q, %v; want an ErrProtocol", data, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(data) != c.data || (p.Offset == nil) != (c.off == nil) || (p.Offset != nil && *p.Offset != *c.off) {
				t.Fatalf("ParseData = %+v %q", p, data)
			}
		})
	}
}

func FuzzParseData(f *testing.F) {
	f.Add([]byte(`{"channel":"ahp-tcp:/t1","offset":7,"data":"SGVsbG8="}`))
	f.Add([]byte(`{"data":"QQ==","offset":18446744073709551615}`))
	f.Add([]byte(`{"channel":"c","data":"\/w=="}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		fp, fdata, fok := scanData(b)
		fp.Data = string(fdata)
		var sp DataParams
		if json.Unmarshal(b, &sp) != nil {
			if fok {
				t.Fatalf("fast path accepted what encoding/json rejects: %q", b)
			}
			return
		}
		if fok && (fp.Channel != sp.Channel || fp.Data != sp.Data || (fp.Offset == nil) != (sp.Offset == nil) || (fp.Offset != nil && *fp.Offset != *sp.Offset)) {
			t.Fatalf("fast %+v != json %+v for %q", fp, sp, b)
		}
	})
}

func TestTrim(t *testing.T) {
	off := func(v DecodedOffset) *DecodedOffset { return &v }
	for _, c := range []struct {
		off  *DecodedOffset
		next DecodedOffset
		want string
		bad  bool
	}{
		{nil, 10, "abcd", false},
		{off(10), 10, "abcd", false},
		{off(8), 10, "cd", false},
		{off(6), 10, "", false},
		{off(0), 10, "", false},
		{off(11), 10, "", true},
	} {
		got, err := Trim(c.off, []byte("abcd"), c.next)
		if (err != nil) != c.bad || string(got) != c.want {
			t.Errorf("Trim(%v, abcd, %d) = %q, %v", c.off, c.next, got, err)
		}
	}
}

func TestPolicy(t *testing.T) {
	def, _ := NewPolicy([]string{"127.0.0.0/8", "::1/128"})
	wide, _ := NewPolicy([]string{"0.0.0.0/0", "::/0"})
	meta, _ := NewPolicy([]string{"0.0.0.0/0", "169.254.169.254"})
	for _, c := range []struct {
		p    *Policy
		addr string
		ok   bool
	}{
		{def, "127.0.0.1", true},
		{def, "127.1.2.3", true},
		{def, "::1", true},
		{def, "::ffff:127.0.0.1", true},
		{def, "10.0.0.1", false},
		{def, "0.0.0.0", false},
		{wide, "10.0.0.1", true},
		{wide, "0.0.0.0", false},
		{wide, "224.0.0.1", false},
		{wide, "169.254.169.254", false},
		{wide, "169.254.1.1", false},
		{wide, "fe80::1", false},
		{wide, "fd00:ec2::254", false},
		{meta, "169.254.169.254", true},
		{meta, "169.254.1.1", false},
	} {
		_, ok := c.p.Check(netip.MustParseAddr(c.addr))
		if ok != c.ok {
			t.Errorf("Check(%s) = %v, want %v", c.addr, ok, c.ok)
		}
	}
	if _, err := NewPolicy([]string{"10.0.0.0/33"}); err == nil {
		t.Error("NewPolicy accepted 10.0.0.0/33")
	}
}

// TestPolicyOwn (issue 27 item 14): the daemon's own listeners are
// refused in every spelling of their address, on their port only; one on
// the unspecified address takes every local address on its port.
func TestPolicyOwn(t *testing.T) {
	def, _ := NewPolicy([]string{"127.0.0.0/8", "::1/128"})
	wide, _ := NewPolicy([]string{"0.0.0.0/0", "::/0"})
	for _, p := range []*Policy{def, wide} {
		p.SetOwn([]netip.AddrPort{
			netip.MustParseAddrPort("[::ffff:127.0.0.1]:4433"), // as a TCPAddr may give it
			netip.MustParseAddrPort("[::]:9464"),
			netip.MustParseAddrPort("10.9.9.9:5000"),
		})
		p.localAddrs = func() []netip.Addr {
			return []netip.Addr{netip.MustParseAddr("10.1.2.3"), netip.MustParseAddr("fd00::5")}
		}
	}
	for _, c := range []struct {
		p      *Policy
		addr   string
		port   int
		reason string // "" when allowed
	}{
		{def, "127.0.0.1", 4433, "the daemon's own listener 127.0.0.1:4433 (a TCP channel may not connect back into sidecar)"},
		{def, "::ffff:127.0.0.1", 4433, "the daemon's own listener 127.0.0.1:4433 (a TCP channel may not connect back into sidecar)"},
		{def, "127.0.0.1", 4434, ""},
		{def, "127.0.0.2", 4433, ""}, // not where a listener on 127.0.0.1 accepts
		{def, "::1", 4433, ""},
		{def, "127.0.0.1", 9464, "the daemon's own listener [::]:9464 (a TCP channel may not connect back into sidecar)"},
		{def, "127.3.2.1", 9464, "the daemon's own listener [::]:9464 (a TCP channel may not connect back into sidecar)"},
		{def, "::1", 9464, "the daemon's own listener [::]:9464 (a TCP channel may not connect back into sidecar)"},
		{def, "10.1.2.3", 9464, "not in tcp.allow"}, // the allow rule speaks first
		{wide, "10.1.2.3", 9464, "the daemon's own listener [::]:9464 (a TCP channel may not connect back into sidecar)"},
		{wide, "::ffff:10.1.2.3", 9464, "the daemon's own listener [::]:9464 (a TCP channel may not connect back into sidecar)"},
		{wide, "fd00::5", 9464, "the daemon's own listener [::]:9464 (a TCP channel may not connect back into sidecar)"},
		{wide, "10.1.2.4", 9464, ""},
		{wide, "10.9.9.9", 5000, "the daemon's own listener 10.9.9.9:5000 (a TCP channel may not connect back into sidecar)"},
		{wide, "10.1.2.3", 5000, ""},
	} {
		reason, ok := c.p.CheckDest(netip.MustParseAddr(c.addr), c.port)
		if ok != (c.reason == "") || reason != c.reason {
			t.Errorf("CheckDest(%s, %d) = %q, %v; want %q", c.addr, c.port, reason, ok, c.reason)
		}
	}
}

// TestDialOwnListener (issue 27 item 14): a name that resolves to the
// daemon's own listener (localhost, a hosts-file alias) is refused
// before anything is dialled, with the rule.
func TestDialOwnListener(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	own := l.Addr().(*net.TCPAddr).AddrPort()
	pol, _ := NewPolicy([]string{"127.0.0.0/8", "::1/128"})
	pol.SetOwn([]netip.AddrPort{own})
	d := &Dialer{Policy: pol, Timeout: 2 * time.Second, Resolver: fakeResolver{
		"localhost":   {netip.MustParseAddr("::1"), netip.MustParseAddr("127.0.0.1")},
		"sidecar.lan": {netip.MustParseAddr("::ffff:127.0.0.1")},
	}}
	port := int(own.Port())
	for _, host := range []string{"127.0.0.1", "::ffff:127.0.0.1", "[::ffff:7f00:1]", "localhost", "sidecar.lan"} {
		_, err := d.Dial(context.Background(), host, port)
		var oe *OpenError
		want := fmt.Sprintf("not allowed by policy: the daemon's own listener 127.0.0.1:%d (a TCP channel may not connect back into sidecar)", port)
		if !errors.As(err, &oe) || oe.Kind != KindDenied || !strings.HasSuffix(err.Error(), want) {
			t.Errorf("Dial(%s, %d) = %v; want KindDenied ending %q", host, port, err, want)
		}
	}
	// Nothing reached the listener: an accept finds no connection.
	_ = l.(*net.TCPListener).SetDeadline(time.Now())
	if c, err := l.Accept(); err == nil {
		c.Close()
		t.Error("a refused destination was dialled")
	}
}

type fakeResolver map[string][]netip.Addr

func (f fakeResolver) LookupNetIP(ctx context.Context, _, host string) ([]netip.Addr, error) {
	if host == "slow.test" {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if a, ok := f[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// sendBuffer returns c's SO_SNDBUF.
func sendBuffer(t *testing.T, c *net.TCPConn) int {
	t.Helper()
	raw, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	n := -1
	if err := raw.Control(func(fd uintptr) {
		n, err = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF)
	}); err != nil {
		t.Fatal(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestDial(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	port := l.Addr().(*net.TCPAddr).Port
	// A port nothing listens on: bind one, close it.
	cl, _ := net.Listen("tcp", "127.0.0.1:0")
	closedPort := cl.Addr().(*net.TCPAddr).Port
	_ = cl.Close()

	pol, _ := NewPolicy([]string{"127.0.0.0/8", "::1/128"})
	d := &Dialer{Policy: pol, Timeout: 200 * time.Millisecond, Resolver: fakeResolver{
		"ok.test":    {netip.MustParseAddr("127.0.0.1")},
		"meta.test":  {netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("169.254.169.254")},
		"other.test": {netip.MustParseAddr("10.1.2.3")},
	}}
	ctx := context.Background()
	c, err := d.Dial(ctx, "ok.test", port)
	if err != nil {
		t.Fatalf("dial ok.test: %v", err)
	}
	// A loopback destination gets a fixed send buffer (no autotuning up
	// to 4 MiB): a destination that does not read holds back the client
	// after LoopbackSendBuffer (Linux keeps twice the value set).
	if got, want := sendBuffer(t, c), 2*LoopbackSendBuffer; runtime.GOOS == "linux" && got != want {
		t.Errorf("SO_SNDBUF of a loopback destination: %d, want %d", got, want)
	}
	_ = c.Close()
	for _, tc := range []struct {
		host string
		port int
		kind Kind
		msg  string
	}{
		{"127.0.0.1", closedPort, KindRefused, "refused"},
		{"meta.test", port, KindDenied, "not allowed by policy: a cloud metadata address"},
		{"other.test", port, KindDenied, "connect to other.test:"},
		{"10.0.0.1", port, KindDenied, "not allowed by policy"},
		{"nx.test", port, KindNoSuchHost, `cannot resolve "nx.test"`},
		{"slow.test", port, KindTimeout, "timed out"},
		{"[::1]", closedPort, KindRefused, "connect to [::1]:"},
	} {
		_, err := d.Dial(ctx, tc.host, tc.port)
		var oe *OpenError
		if !errors.As(err, &oe) || oe.Kind != tc.kind || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("Dial(%s:%d) = %v; want kind %d with %q", tc.host, tc.port, err, tc.kind, tc.msg)
			continue
		}
		if strings.Contains(err.Error(), "dial tcp") || strings.Contains(err.Error(), "connect: ") {
			t.Errorf("Dial(%s) message carries raw system text: %q", tc.host, err)
		}
	}
}

func TestListeningPorts(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	ports, err := ListeningPorts(context.Background())
	if err != nil {
		t.Skipf("listening ports not readable here: %v", err)
	}
	for _, p := range ports {
		if p.Port == port && p.Address == "127.0.0.1" {
			return
		}
	}
	t.Errorf("port %d not among the listening ports %v", port, ports)
}

// TestStartPollingFirstReading (issue 27 item 7): StartPolling returns
// once the first reading is published (a host serving its root state
// after it lists the ports from the first snapshot), and its goroutine
// ends with ctx.
func TestStartPollingFirstReading(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	if _, err := ListeningPorts(context.Background()); err != nil {
		t.Skipf("listening ports not readable here: %v", err)
	}
	var mu sync.Mutex
	var got []rpc.ListeningPort
	readings := 0
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	StartPolling(ctx, &wg, time.Hour, func(ports []rpc.ListeningPort) {
		mu.Lock()
		defer mu.Unlock()
		got, readings = ports, readings+1
	}, func(err error) { t.Errorf("warned: %v", err) })
	mu.Lock()
	n, listed := readings, slices.ContainsFunc(got, func(p rpc.ListeningPort) bool { return p.Address == "127.0.0.1" && p.Port == port })
	mu.Unlock()
	if n != 1 || !listed {
		t.Errorf("when StartPolling returned: %d readings published, port %d listed %v (%v); want 1 listing it", n, port, listed, got)
	}
	cancel()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the polling goroutine did not end with its context")
	}
}

// TestSpecialWord: the SWAR test flags exactly the words holding a byte
// scanString must look at.
func TestSpecialWord(t *testing.T) {
	for pos := range 8 {
		for c := range 256 {
			w := []byte("AAAAAAAA")
			w[pos] = byte(c)
			v := uint64(0)
			for i := 7; i >= 0; i-- {
				v = v<<8 | uint64(w[i])
			}
			want := c == '"' || c == '\\' || c < 0x20 || c >= 0x80
			if got := special(v); got != want {
				t.Fatalf("byte %#x at %d: special = %v, want %v", c, pos, got, want)
			}
		}
	}
}

// TestAppendData: the data is appended after dst's bytes; on error dst
// comes back unchanged; the loose scan never accepts what the careful one
// would read differently.
func TestAppendData(t *testing.T) {
	dst := append(make([]byte, 0, 4), "ab"...)
	p, out, err := AppendData(dst, json.RawMessage(`{"channel":"ahp-tcp:/t1","offset":3,"data":"SGVsbG8="}`))
	if err != nil || string(out) != "abHello" || p.Channel != "ahp-tcp:/t1" || p.Offset == nil || *p.Offset != 3 {
		t.Fatalf("AppendData = %+v %q %v", p, out, err)
	}
	for _, c := range []struct{ name, params, want string }{
		{"escaped slash", `{"channel":"c","data":"\/w=="}`, "ab\xff"},
		{"escaped quote ends no string", `{"channel":"c","data":"QQ==\"","x":1}`, ""},
		{"two data members, the last wins", `{"data":"QQ==","data":"Qg=="}`, "abB"},
		{"escape in an earlier data member", `{"data":"QQ==\\","data":"Qg=="}`, "abB"},
		{"not base64", `{"channel":"c","data":"Q!=="}`, ""},
		{"empty", `{"channel":"c","data":""}`, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, out, err := AppendData([]byte("ab"), json.RawMessage(c.params))
			if c.want == "" {
				if err == nil || !errors.Is(err, ErrProtocol) || string(out) != "ab" {
					t.Fatalf("AppendData = %q, %v; want dst unchanged and an ErrProtocol", out, err)
				}
				return
			}
			if err != nil || string(out) != c.want {
				t.Fatalf("AppendData = %q, %v; want %q", out, err, c.want)
			}
		})
	}
}

// FuzzAppendData: whatever AppendData accepts, encoding/json reads the
// same way, and its data is the strict decoding.
func FuzzAppendData(f *testing.F) {
	f.Add([]byte(`{"channel":"ahp-tcp:/t1","offset":7,"data":"SGVsbG8="}`))
	f.Add([]byte(`{"data":"QQ==\\","data":"Qg=="}`))
	f.Add([]byte(`{"channel":"c","data":"\/w=="}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, out, err := AppendData([]byte("x"), b)
		if err != nil {
			return
		}
		var sp DataParams
		if e := json.Unmarshal(b, &sp); e != nil {
			t.Fatalf("AppendData accepted what encoding/json rejects: %q", b)
		}
		want, e := base64.StdEncoding.Strict().DecodeString(sp.Data)
		if e != nil || "x"+string(want) != string(out) || p.Channel != sp.Channel || (p.Offset == nil) != (sp.Offset == nil) || (p.Offset != nil && *p.Offset != *sp.Offset) {
			t.Fatalf("AppendData %+v %q != json %+v for %q", p, out, sp, b)
		}
	})
}

// FuzzBase64 checks the vector decoder with its canonical-form checks
// against the strict standard decoder: the same bytes for canonical
// padded base64 (the text is exactly the encoding of what it decodes to),
// an error for everything else.
func FuzzBase64(f *testing.F) {
	for _, s := range []string{"QQ==", "QR==", "QUI=", "QUJ=", "QUJD", "QU\nJD", "QUJD\r\n", "Q", "QQ=", "QQ==QQ==", "_w==", "////", "A===",
		strings.Repeat("QUJD", 40) + "\n" + strings.Repeat("QUJD", 8), strings.Repeat("QUJD", 40) + "QR=="} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, s []byte) {
		got, err := appendBase64([]byte("x"), s)
		want, serr := base64.StdEncoding.Strict().DecodeString(string(s))
		canonical := serr == nil && len(s) > 0 && base64.StdEncoding.EncodeToString(want) == string(s)
		if canonical != (err == nil) {
			t.Fatalf("%q: canonical %v, appendBase64 error %v", s, canonical, err)
		}
		if err != nil {
			if string(got) != "x" {
				t.Fatalf("%q: dst changed on error: %q", s, got)
			}
			return
		}
		if string(got) != "x"+string(want) {
			t.Fatalf("%q: decoded %q, want %q", s, got[1:], want)
		}
		if enc := appendBase64Encode(nil, want); string(enc) != string(s) {
			t.Fatalf("%q: re-encoded as %q", s, enc)
		}
	})
}
