package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/sidecar-dev/sidecar/client"
	"github.com/sidecar-dev/sidecar/rpc"
)

func cpCmd() *cobra.Command {
	var cf connFlags
	var recursive, force bool
	cmd := &cobra.Command{
		Use:   "cp [-r] [-f] URL:PATH LOCAL | LOCAL URL:PATH",
		Short: "Copy files to and from the host, resuming where a transfer stopped",
		Long: `Copy a file (or with -r a directory tree) from the host to LOCAL, or
from LOCAL to the host. The remote side is written URL:PATH, PATH
absolute (wss://127.0.0.1:4433/ahp:/srv/data.bin); with --via it is
:PATH. Into an existing directory, the copy takes the source's name.

Files land under a partial name (.NAME.sidecar-part) beside the target
and are renamed onto it only once complete and verified (size and
SHA-256), with their mode and modification time. A copy cut short
(Ctrl-C, a killed client) leaves the partial file: running the same cp
again continues it when its first bytes are still the source's. A lost
connection is resumed by itself, as forward does. A file whose
destination already has its size and modification time, and then (both
ends hashed) its SHA-256, is not sent again (counted unchanged);
--force sends it anyway.

A tree is copied as its entries: directories, files and symbolic links
(as links; one that would lead out of the destination is refused by the
receiver, as are names with ".." and absolute names); devices, sockets
and pipes are not copied. An entry named like a partial file
(".NAME.sidecar-part", the leftover of an interrupted copy) is never
copied, on either end: it is skipped and named. The host's files block
says which paths may be read and written.

A progress bar (bytes, rate, time left) is drawn on a terminal; a
summary line ends the copy. Exit status: 0 when every entry was copied;
1 when any was not (each is named) or the source cannot be read; 2 for a
usage error; 255 when the connection cannot be made.`,
		Example: `  sidecar cp wss://127.0.0.1:4433/ahp:/var/log/app.log .
  sidecar cp -r ./site wss://127.0.0.1:4433/ahp:/srv/www
  sidecar cp --via 'ssh vm sidecar stdio' :/etc/hosts hosts.vm`,
	}
	cf.register(cmd)
	// Set after register: the URL is inside an argument here, not one.
	cmd.Args = cobra.ExactArgs(2)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		return cp(&cf, args[0], args[1], recursive, force)
	}
	_ = cmd.Flags().MarkHidden("ordinary")
	cmd.Flags().BoolVarP(&recursive, "recursive", "r", false, "copy directories as trees")
	cmd.Flags().BoolVarP(&force, "force", "f", false, "send files the destination already holds (same size, mtime and SHA-256) too")
	return cmd
}

// splitRemote splits a URL:PATH argument (or :PATH with via), PATH
// absolute; ok false when arg is local: it does not start with a URL
// scheme and "://" (a local name may hold "://" further on). The path
// starts at the first ":/" after the scheme's "://", so a URL that holds
// ":/" itself (in its path or query) cannot be written here. A remote
// argument without ":/" gives what follows the last ':' after the host
// as a relative path, which the caller refuses by name.
func splitRemote(arg string, via bool) (url, path string, ok bool) {
	if via && strings.HasPrefix(arg, ":/") {
		return viaURL, arg[1:], true
	}
	if via && strings.HasPrefix(arg, viaURL+":/") {
		return viaURL, arg[len(viaURL)+1:], true
	}
	i := strings.Index(arg, "://")
	if i <= 0 || strings.IndexFunc(arg[:i], func(r rune) bool {
		return !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '+' || r == '-' || r == '.')
	}) >= 0 {
		return "", "", false
	}
	rest := arg[i+3:]
	if j := strings.Index(rest, ":/"); j >= 0 {
		return arg[:i+3+j], rest[j+1:], true
	}
	if slash := strings.IndexByte(rest, '/'); slash >= 0 {
		if k := strings.LastIndexByte(rest, ':'); k > slash {
			return arg[:i+3+k], rest[k+1:], true // relative: refused by the caller
		}
	}
	return arg, "", true // no path: refused by the caller
}

func cp(cf *connFlags, a, b string, recursive, force bool) error {
	via := cf.via != ""
	urlA, pathA, remoteA := splitRemote(a, via)
	urlB, pathB, remoteB := splitRemote(b, via)
	var url, remote, local string
	download := false
	switch {
	case remoteA && remoteB:
		return &exitError{code: 2, err: errors.New("both arguments are remote: copy between the host and a local path")}
	case remoteA:
		url, remote, local, download = urlA, pathA, b, true
	case remoteB:
		url, remote, local = urlB, pathB, a
	default:
		return &exitError{code: 2, err: errors.New("neither argument is remote: write the host's side as URL:PATH (or :PATH with --via)")}
	}
	if remote == "" || !strings.HasPrefix(remote, "/") {
		return &exitError{code: 2, err: fmt.Errorf("the remote path must be absolute: URL:/PATH, got %q", remote)}
	}
	// A trailing slash on the host's side of an upload names a directory
	// that must exist, as cp and scp read it: never a file made under
	// that name.
	wantDir := !download && len(remote) > 1 && strings.HasSuffix(remote, "/")
	remote = path.Clean(remote)
	if via && url != viaURL {
		return &exitError{code: 2, err: fmt.Errorf("%s and --via are exclusive: write the remote side as :PATH", url)}
	}
	if err := cf.check(); err != nil {
		return &exitError{code: 2, err: err}
	}
	if !via {
		if _, err := client.CheckURL(url, cf.transport); err != nil {
			return &exitError{code: 2, err: err}
		}
	}
	cf.onReconnect = func(st client.ReconnectStatus) {
		if st.State == client.Connecting {
			return
		}
		if l := reconnectLine(st); l != "" {
			fmt.Fprintf(os.Stderr, "\rsidecar: %s\n", l)
		}
	}
	ctx, caught, stop := signalContext(os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	conn, err := cf.dial(ctx, url)
	if err != nil {
		return dialFailed(err, cf.dialSignal(ctx, err, caught))
	}
	defer conn.Close()
	if conn.Initialized().Files == nil {
		return &exitError{code: 255, err: fmt.Errorf("%s does not offer file transfers (no files in its capabilities)", url)}
	}
	if wantDir {
		fi, err := conn.StatFile(ctx, remote, false)
		var re *rpc.Error
		switch {
		case errors.As(err, &re) && re.Code == rpc.CodeNotFound:
			return &exitError{code: 1, err: fmt.Errorf("%s/: no such directory on the host", printable(remote))}
		case err != nil:
			return &exitError{code: 1, err: describeCopyError(err)}
		case fi.Type != rpc.FileDir && fi.Type != rpc.FileSymlink: // a link: Upload follows it, and says if it is no directory
			return &exitError{code: 1, err: fmt.Errorf("%s/: not a directory on the host", printable(remote))}
		}
	}
	// A signal stops the copy at once: the streams end with the
	// connection, leaving the partial files for the next cp.
	stopped := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stopped()
	prog := newProgress(os.Stderr)
	opts := client.CopyOptions{Recursive: recursive, Force: force, Progress: prog.add, Planned: prog.plan}
	start := time.Now()
	prog.start()
	var res client.CopyResult
	if download {
		res, err = client.Download(ctx, conn, remote, local, opts)
	} else {
		res, err = client.Upload(ctx, conn, local, remote, opts)
	}
	prog.stop()
	if sig := caught(); sig != 0 {
		return interrupted(sig, "copying (run the same cp again to continue)")
	}
	if err != nil {
		return &exitError{code: 1, err: errors.New(printable(describeCopyError(err).Error()))}
	}
	took := time.Since(start)
	what := fmt.Sprintf("%d file%s", res.Files, plural(res.Files, "", "s"))
	if res.Unchanged > 0 {
		what += fmt.Sprintf(" (%d more unchanged, not sent)", res.Unchanged)
	}
	if other := res.Entries - res.Files - res.Unchanged; other > 0 {
		what += fmt.Sprintf(" and %d other entr%s (directories, links)", other, plural(other, "y", "ies"))
	}
	if res.Entries > 0 || len(res.Failed) == 0 {
		fmt.Fprintf(os.Stderr, "sidecar: copied %s, %s in %s (%s/s)\n", what,
			sizeString(res.Bytes), took.Round(time.Millisecond), sizeString(int64(float64(res.Bytes)/max(took.Seconds(), 1e-3))))
	}
	for _, f := range res.Skipped {
		fmt.Fprintf(os.Stderr, "sidecar: %s: %s\n", printable(f.Path), printable(f.Err.Error()))
	}
	if len(res.Failed) > 0 {
		for _, f := range res.Failed {
			fmt.Fprintf(os.Stderr, "sidecar: not copied: %s: %s\n", printable(f.Path), printable(describeCopyError(f.Err).Error()))
		}
		return &exitError{code: 1, err: fmt.Errorf("%d entr%s not copied", len(res.Failed), plural(len(res.Failed), "y", "ies"))}
	}
	return nil
}

// describeCopyError is err in words: a host's refusal by its message.
func describeCopyError(err error) error {
	var re *rpc.Error
	if errors.As(err, &re) {
		return errors.New(re.Message)
	}
	switch {
	case errors.Is(err, syscall.ENOSPC):
		return fmt.Errorf("%w (ENOSPC)", err)
	case errors.Is(err, syscall.EDQUOT):
		return fmt.Errorf("%w (EDQUOT)", err)
	}
	return err
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// sizeString is n bytes in binary units.
func sizeString(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	f, u := float64(n), 0
	for f >= unit && u < 4 {
		f /= unit
		u++
	}
	return fmt.Sprintf("%.1f %ciB", f, "KMGTP"[u-1])
}

// progress draws a progress bar on a terminal (bytes, rate, ETA), five
// times a second; nothing when w is not a terminal.
type progress struct {
	w       io.Writer
	tty     bool
	done    atomic.Int64
	total   atomic.Int64
	begin   time.Time
	quit    chan struct{}
	stopped sync.WaitGroup
}

func newProgress(f *os.File) *progress {
	return &progress{w: f, tty: term.IsTerminal(int(f.Fd())), quit: make(chan struct{})}
}

func (p *progress) add(n int64)  { p.done.Add(n) }
func (p *progress) plan(n int64) { p.total.Store(n) }

func (p *progress) start() {
	p.begin = time.Now()
	if !p.tty {
		return
	}
	p.stopped.Go(func() {
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-p.quit:
				fmt.Fprint(p.w, "\r\033[K")
				return
			case <-t.C:
				fmt.Fprint(p.w, "\r\033[K"+p.line())
			}
		}
	})
}

func (p *progress) line() string {
	done, total := p.done.Load(), p.total.Load()
	el := time.Since(p.begin).Seconds()
	rate := float64(done) / max(el, 1e-3)
	s := fmt.Sprintf("%s / %s  %s/s", sizeString(done), sizeString(total), sizeString(int64(rate)))
	if total > 0 {
		const width = 24
		frac := min(float64(done)/float64(total), 1)
		n := int(frac * width)
		s = "[" + strings.Repeat("#", n) + strings.Repeat(".", width-n) + "] " + s
		if rate > 0 && done < total {
			s += "  ETA " + time.Duration(float64(total-done)/rate*float64(time.Second)).Round(time.Second).String()
		}
	}
	return s
}

func (p *progress) stop() {
	close(p.quit)
	p.stopped.Wait()
}
