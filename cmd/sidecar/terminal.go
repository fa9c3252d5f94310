package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/term"

	"github.com/sidecar-dev/sidecar/client"
	"github.com/sidecar-dev/sidecar/rpc"
)

// terminalArgs are the terminal ids among the arguments of attach or
// kill: those after the URL. With --via and no URL first, all of them:
// connFlags also checks the arguments as given, before it puts viaURL in
// (an empty id is no URL left out).
func terminalArgs(cf *connFlags, args []string) []string {
	if len(args) > 0 && cf.via != "" && !isURL(args[0]) {
		return args
	}
	if len(args) == 0 {
		return nil
	}
	return args[1:]
}

// terminalURI accepts "t1" or "ahp-terminal:/t1".
func terminalURI(s string) string {
	if strings.HasPrefix(s, rpc.TerminalScheme) {
		return s
	}
	return rpc.TerminalScheme + "/" + s
}

func newTerminalID(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + "-" + hex.EncodeToString(b[:])
}

// noTerminal is the error of a terminal the host does not have; ls is
// how to list the ones it has (connFlags.lsCommand).
func noTerminal(uri, ls string) error {
	return fmt.Errorf("no terminal %s on this host (%s lists them)", uri, ls)
}

// makeRaw puts the terminal f in raw mode and returns what restores it.
// Until then raw mode is put back on every SIGCONT: a shell that stopped
// us (job control) gave the terminal back cooked, and after fg every
// line would be echoed twice and Ctrl-C would kill the client instead of
// reaching the remote program (ssh does the same).
func makeRaw(f *os.File) (func(), error) {
	fd := int(f.Fd())
	state, err := term.MakeRaw(fd)
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex
	restored := false
	cont := make(chan os.Signal, 1)
	signal.Notify(cont, syscall.SIGCONT)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-cont:
				mu.Lock()
				if !restored {
					_, _ = term.MakeRaw(fd)
				}
				mu.Unlock()
			case <-done:
				return
			}
		}
	}()
	return func() {
		signal.Stop(cont)
		mu.Lock()
		restored = true
		_ = term.Restore(fd, state)
		mu.Unlock()
		close(done)
	}, nil
}

// watchResize sends terminal/resized on every SIGWINCH.
func watchResize(ctx context.Context, t *client.Terminal, holding *atomic.Bool) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGWINCH)
	defer signal.Stop(ch)
	for {
		select {
		case <-ch:
			if w, h, err := term.GetSize(int(os.Stdout.Fd())); err == nil && holding.Load() {
				_ = t.Resize(ctx, w, h)
			}
		case <-ctx.Done():
			return
		case <-t.Done():
			return
		}
	}
}

// forwardInput copies r to the terminal. With detach set, "~." after a
// newline closes it instead (ssh's escape), and "~t" calls takeOver when
// set (escapeFilter). With eofCtrlD, the end of r sends ^D so a program
// reading its input sees end of file.
func forwardInput(ctx context.Context, t *client.Terminal, r io.Reader, detach chan struct{}, takeOver func() bool, eofCtrlD bool) {
	esc := escapeFilter{takeOver: takeOver}
	buf := make([]byte, 4096)
	midLine := false
	for {
		n, err := r.Read(buf)
		if n > 0 {
			data := buf[:n]
			midLine = data[len(data)-1] != '\n'
			if detach != nil {
				var hit bool
				data, hit = esc.Filter(data)
				if len(data) > 0 {
					if t.Input(ctx, data) != nil {
						return
					}
				}
				if hit {
					close(detach)
					return
				}
				continue
			}
			if t.Input(ctx, data) != nil {
				return
			}
		}
		if err != nil {
			if detach != nil {
				// The user's terminal is gone (end of file, or EIO
				// after a hangup without a controlling terminal): leave
				// as ~. does, so the claim passes on at once.
				close(detach)
				return
			}
			if eofCtrlD {
				// The terminal's line discipline turns ^D into end of
				// file at the start of a line; mid-line the first ^D only
				// hands over the partial line, so a second one is needed.
				eof := []byte{4}
				if midLine {
					eof = []byte{4, 4}
				}
				_ = t.Input(ctx, eof)
			}
			return
		}
	}
}

// crlfWriter turns the PTY's "\r\n" into "\n" when output goes to a file
// or pipe, holding back a trailing '\r' until the next write.
type crlfWriter struct {
	w       io.Writer
	pending bool
	buf     []byte
}

func (c *crlfWriter) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.buf = c.buf[:0]
	if c.pending {
		c.pending = false
		if len(p) == 0 || p[0] != '\n' {
			c.buf = append(c.buf, '\r')
		}
	}
	for i := 0; i < len(p); i++ {
		if p[i] == '\r' {
			if i+1 == len(p) {
				c.pending = true
				break
			}
			if p[i+1] == '\n' {
				continue
			}
		}
		c.buf = append(c.buf, p[i])
	}
	if _, err := c.w.Write(c.buf); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush writes a held-back '\r'.
func (c *crlfWriter) Flush() {
	if c.pending {
		c.pending = false
		_, _ = c.w.Write([]byte{'\r'})
	}
}
