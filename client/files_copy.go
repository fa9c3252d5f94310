package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sidecar-dev/sidecar/internal/pipehash"
	"github.com/sidecar-dev/sidecar/internal/writeback"
	"github.com/sidecar-dev/sidecar/rpc"
)

// PartialSuffix ends a partial file's name: ".<name>.sidecar-part" beside
// its target, on either end (adapters/files.PartialName).
const PartialSuffix = ".sidecar-part"

func partialName(base string) string { return "." + base + PartialSuffix }

// IsPartialName reports whether base is named like a partial file
// (".X.sidecar-part"): such an entry is never copied (a leftover of an
// interrupted copy; written as a target it could be another entry's live
// partial file), on either end.
func IsPartialName(base string) bool {
	return len(base) > len(PartialSuffix)+1 && strings.HasPrefix(base, ".") && strings.HasSuffix(base, PartialSuffix)
}

// errPartialSkipped: an entry named like a partial file is not copied.
var errPartialSkipped = errors.New("skipped: named like a partial file of an interrupted copy (.NAME" + PartialSuffix + ")")

// CopyOptions configure Download and Upload.
type CopyOptions struct {
	// Recursive copies a directory as a tree (cp -r).
	Recursive bool
	// Progress, when set, is told the bytes of file content copied as
	// they are (from several goroutines at once).
	Progress func(n int64)
	// Planned, when set, is told the total bytes to copy once known.
	Planned func(total int64)
	// Parallel bounds the files of a tree copied at once, each on its
	// own channel (DefaultParallel when 0 or less).
	Parallel int
	// Force sends every file, even one the destination already holds
	// (by default a file whose destination has its size and
	// modification time, then its SHA-256, is left as it is: sameFile).
	Force bool
}

// DefaultParallel is how many files of a tree are copied at once by
// default: enough to hide a round trip per small file, few enough that
// the host's files.max_per_principal (16 by default) leaves room for
// other transfers.
const DefaultParallel = 4

// copyEach calls fn for every item, at most parallel at once
// (DefaultParallel when 0 or less), and returns when all calls have.
func copyEach[T any](parallel int, items []T, fn func(T)) {
	if parallel <= 0 {
		parallel = DefaultParallel
	}
	work := make(chan T)
	var wg sync.WaitGroup
	for range min(parallel, len(items)) {
		wg.Go(func() {
			for it := range work {
				fn(it)
			}
		})
	}
	for _, it := range items {
		work <- it
	}
	close(work)
	wg.Wait()
}

// CopyError is one entry not copied: its path (the source's) and why.
type CopyError struct {
	Path string
	Err  error
}

func (e CopyError) Error() string { return e.Path + ": " + e.Err.Error() }

// CopyResult is what a copy did: the files, bytes and entries copied,
// each entry not copied, and each entry skipped on purpose (named like
// a partial file: IsPartialName). Unchanged counts the files the
// destination already held (sameFile), not sent: they are in Entries,
// not in Files.
type CopyResult struct {
	Files, Entries int
	Unchanged      int
	Bytes          int64
	Failed         []CopyError
	Skipped        []CopyError
}

// copyAttempts bounds the tries of one file whose stream was lost (not
// kept across a reconnect): each continues from the partial file.
const copyAttempts = 5

// copyRetryable reports whether err may go away on another try: not a
// refusal of the host (an *rpc.Error), a verification failure or the
// host's outcome, nor a full disk, quota or read-only file system here.
func copyRetryable(err error) bool {
	var re *rpc.Error
	var ve verifyError
	return err != nil && !errors.As(err, &re) && !errors.As(err, &ve) && !errors.Is(err, context.Canceled) &&
		!errors.Is(err, syscall.ENOSPC) && !errors.Is(err, syscall.EDQUOT) && !errors.Is(err, syscall.EROFS)
}

type verifyError struct{ error }

// QuotaWait bounds how long a copy waits for a place under the host's
// file transfer quota (files.max_per_principal, files.max_total) before
// an entry fails: the places of transfers that just ended are freed a
// moment after their client saw them end, and other clients' come free
// in time.
const QuotaWait = 60 * time.Second

// isQuotaRefusal reports whether err is the host's quota refusal
// (-32009 "… limit reached: …").
func isQuotaRefusal(err error) bool {
	var re *rpc.Error
	return errors.As(err, &re) && re.Code == rpc.CodePermissionDenied && strings.Contains(re.Message, " limit reached: ")
}

// openWaiting is OpenFile, trying again with backoff (10 ms doubling to
// 500 ms) while the host refuses it for its quota, for QuotaWait at most.
func openWaiting(ctx context.Context, c *Conn, p rpc.FilesOpenParams) (*TCPConn, rpc.FilesOpenResult, error) {
	deadline := time.Now().Add(QuotaWait)
	backoff := 10 * time.Millisecond
	for {
		stream, res, err := c.OpenFile(ctx, p)
		if err == nil || !isQuotaRefusal(err) || time.Now().After(deadline) {
			return stream, res, err
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, res, ctx.Err()
		case <-t.C:
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

// errUnchanged: the destination already holds the file (sameFile): it
// is not sent.
var errUnchanged = errors.New("unchanged")

// sameFile is rsync's quick check, made sure: a destination file with
// the source's size and modification time (to the nanosecond, as a copy
// sets it) is hashed on both ends at once (local is the local file,
// remote the host's path) and is the same when the SHA-256 sums match.
func sameFile(ctx context.Context, c *Conn, remote string, ri rpc.FileInfo, local *os.File, li os.FileInfo) bool {
	if ri.Type != rpc.FileRegular || !li.Mode().IsRegular() || ri.Size != li.Size() || ri.MtimeNs != li.ModTime().UnixNano() {
		return false
	}
	theirs := make(chan string, 1)
	go func() {
		st, err := c.StatFile(ctx, remote, true)
		if err != nil || st.Size != ri.Size || st.MtimeNs != ri.MtimeNs {
			theirs <- ""
			return
		}
		theirs <- st.SHA256
	}()
	h := sha256.New()
	_, err := io.Copy(h, io.NewSectionReader(local, 0, li.Size()))
	sum := <-theirs
	return err == nil && sum != "" && sum == hex.EncodeToString(h.Sum(nil))
}

// counted adds one file's outcome to res: copied, unchanged or failed
// (at path).
func (res *CopyResult) counted(path string, n int64, err error) {
	res.Bytes += n
	switch {
	case errors.Is(err, errUnchanged):
		res.Unchanged++
		res.Entries++
	case err != nil:
		res.Failed = append(res.Failed, CopyError{Path: path, Err: err})
	default:
		res.Files++
		res.Entries++
	}
}

// progressWriter counts bytes written through it.
type progressWriter struct{ fn func(int64) }

func (p progressWriter) Write(b []byte) (int, error) {
	if p.fn != nil {
		p.fn(int64(len(b)))
	}
	return len(b), nil
}

// Download copies remote (a path on the host) to local: into local when
// it is an existing directory, else as local. With opts.Recursive a
// directory is copied as a tree. The error is for the copy as a whole
// (the source cannot be read); entries not copied are in the result.
func Download(ctx context.Context, c *Conn, remote, local string, opts CopyOptions) (CopyResult, error) {
	var res CopyResult
	fi, err := c.StatFile(ctx, remote, false)
	if err != nil {
		return res, err
	}
	// A named link is followed, as cp does (its target resolved here:
	// the host takes only clean absolute paths), 8 links at most.
	resolved := remote
	for at, hops := remote, 0; fi.Type == rpc.FileSymlink; hops++ {
		if hops == 8 {
			return res, fmt.Errorf("%s: too many levels of symbolic links", remote)
		}
		if at = fi.Target; !path.IsAbs(at) {
			at = path.Join(path.Dir(remote), at)
		}
		if fi, err = c.StatFile(ctx, path.Clean(at), false); err != nil {
			return res, err
		}
		resolved = path.Clean(at)
		fi.Name = path.Base(remote)
	}
	dest := local
	if st, err := os.Stat(local); err == nil && st.IsDir() {
		dest = filepath.Join(local, path.Base(remote))
	}
	if IsPartialName(filepath.Base(dest)) {
		return res, fmt.Errorf("%s is named like a partial file of an interrupted copy (.NAME%s): refused", dest, PartialSuffix)
	}
	switch fi.Type {
	case rpc.FileRegular:
	case rpc.FileDir:
		if !opts.Recursive {
			return res, fmt.Errorf("%s is a directory (use -r)", remote)
		}
		return downloadTree(ctx, c, remote, dest, opts)
	default:
		return res, fmt.Errorf("%s is not a regular file (%s): refused", remote, fi.Type)
	}
	if opts.Planned != nil {
		opts.Planned(fi.Size)
	}
	dir, err := os.OpenRoot(filepath.Dir(dest))
	if err != nil {
		return res, err
	}
	defer dir.Close()
	n, err := downloadFile(ctx, c, remote, "", resolved, fi, dir, filepath.Base(dest), opts)
	res.counted(remote, n, err)
	return res, nil
}

// downloadFile copies the host's path (with entry, inside it) to base in
// dir, through a partial file that a later try continues, trying again
// while the stream is lost. It returns the bytes received; errUnchanged
// when base already is the file (sameFile: name is the host's path of
// it, links resolved, ri what it is), unless opts.Force.
func downloadFile(ctx context.Context, c *Conn, remote, entry, name string, ri rpc.FileInfo, dir *os.Root, base string, opts CopyOptions) (int64, error) {
	progress := opts.Progress
	if !opts.Force {
		if f, err := dir.OpenFile(base, os.O_RDONLY|noFollow|syscall.O_NONBLOCK, 0); err == nil {
			li, err := f.Stat()
			same := err == nil && sameFile(ctx, c, name, ri, f, li)
			f.Close()
			if same {
				if progress != nil {
					progress(ri.Size)
				}
				return 0, errUnchanged
			}
		}
	}
	var total int64
	var err error
	for try := 0; try < copyAttempts; try++ {
		var n int64
		n, err = downloadOnce(ctx, c, remote, entry, dir, base, progress)
		total += n
		if !copyRetryable(err) {
			return total, err
		}
	}
	return total, err
}

func downloadOnce(ctx context.Context, c *Conn, remote, entry string, dir *os.Root, base string, progress func(int64)) (int64, error) {
	part := partialName(base)
	// The partial file is created only once the host opened the file:
	// a refusal leaves nothing behind.
	f, err := dir.OpenFile(part, os.O_RDWR|noFollow, 0)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return 0, err
	}
	h := sha256.New()
	p := rpc.FilesOpenParams{Path: remote, Entry: entry, Mode: "read"}
	if f != nil {
		defer f.Close()
		if st, err := f.Stat(); err == nil && st.Size() > 0 {
			if _, err := io.Copy(h, io.NewSectionReader(f, 0, st.Size())); err != nil {
				return 0, err
			}
			p.Prefix = &rpc.FilesPrefix{Size: st.Size(), SHA256: hex.EncodeToString(h.Sum(nil))}
		}
	}
	stream, res, err := openWaiting(ctx, c, p)
	if err != nil {
		return 0, err
	}
	defer stream.Close()
	if f == nil {
		if f, err = dir.OpenFile(part, os.O_RDWR|os.O_CREATE|noFollow, 0o600); err != nil {
			stream.Reset()
			return 0, err
		}
		defer f.Close()
	}
	if res.Offset == 0 {
		h.Reset()
	}
	if err := f.Truncate(res.Offset); err != nil {
		stream.Reset()
		return 0, err
	}
	if _, err := f.Seek(res.Offset, io.SeekStart); err != nil {
		stream.Reset()
		return 0, err
	}
	if progress != nil && res.Offset > 0 {
		progress(res.Offset)
	}
	// Hashed on another goroutine, beside the writes.
	ph := pipehash.New(h)
	defer ph.Close()
	// The kernel writes the file to the disk as it grows: the Sync that
	// ends the copy finds little left to write.
	n, err := stream.WriteTo(io.MultiWriter(writeback.New(f, res.Offset), ph, progressWriter{progress}))
	if err != nil {
		stream.Reset()
		return n, err
	}
	if got := res.Offset + n; got != res.Size {
		return n, verifyError{fmt.Errorf("received %d bytes, the file had %d when opened (it changed meanwhile?); run again", got, res.Size)}
	}
	name := remote
	if entry != "" {
		name = path.Join(remote, entry)
	}
	// The host hashed what it sent as it read it (the prefix we kept
	// included): its sum, with the file unchanged since the open, is
	// checked against ours without reading the file again.
	var st rpc.FileInfo
	if err := c.Call(ctx, rpc.MethodFilesStat, rpc.FilesStatParams{Path: name, SHA256: true, Channel: stream.Channel()}, &st); err != nil {
		return n, err
	}
	if sum := hex.EncodeToString(ph.Sum()); st.SHA256 != sum {
		_ = f.Truncate(0)
		return n, verifyError{fmt.Errorf("SHA-256 %s received differs from the host's %s (the file changed meanwhile?); run again", sum, st.SHA256)}
	}
	if err := f.Chmod(rpc.FileModeOf(res.FileMode)); err != nil {
		return n, err
	}
	if err := f.Sync(); err != nil {
		return n, err
	}
	mt := time.Unix(0, res.MtimeNs)
	if err := dir.Chtimes(part, mt, mt); err != nil {
		return n, err
	}
	if fi, err := dir.Lstat(base); err == nil && fi.IsDir() {
		return n, fmt.Errorf("%s is a directory: refused", base)
	}
	return n, dir.Rename(part, base)
}

// treeEntry is one entry of a tree copy: its relative name, and what it
// is.
type treeEntry struct {
	name string
	info rpc.FileInfo
}

// downloadTree copies the host's directory remote to the local dest
// (created), entry by entry; every name and link target is checked as
// the receiver must (rpc.CheckEntry, rpc.CheckLinkTarget), and an
// os.Root keeps every write inside dest.
func downloadTree(ctx context.Context, c *Conn, remote, dest string, opts CopyOptions) (CopyResult, error) {
	var res CopyResult
	var entries []treeEntry
	var walk func(rel string) error
	walk = func(rel string) error {
		return c.ListDir(ctx, path.Join(remote, rel), func(page []rpc.FileInfo) error {
			for _, fi := range page {
				name := path.Join(rel, fi.Name)
				if err := rpc.CheckEntry(name); err != nil || fi.Name == "" || slices.Contains([]byte(fi.Name), '/') {
					res.Failed = append(res.Failed, CopyError{Path: path.Join(remote, rel, fi.Name), Err: fmt.Errorf("hostile name refused: %q", fi.Name)})
					continue
				}
				if IsPartialName(fi.Name) {
					res.Skipped = append(res.Skipped, CopyError{Path: path.Join(remote, name), Err: errPartialSkipped})
					continue
				}
				entries = append(entries, treeEntry{name, fi})
				if fi.Type == rpc.FileDir {
					if err := walk(name); err != nil {
						res.Failed = append(res.Failed, CopyError{Path: path.Join(remote, name), Err: err})
					}
				}
			}
			return nil
		})
	}
	top, err := c.StatFile(ctx, remote, false)
	if err != nil {
		return res, err
	}
	if err := walk(""); err != nil {
		return res, err
	}
	var planned int64
	for _, e := range entries {
		if e.info.Type == rpc.FileRegular {
			planned += e.info.Size
		}
	}
	if opts.Planned != nil {
		opts.Planned(planned)
	}
	if err := os.MkdirAll(dest, 0o700); err != nil {
		return res, err
	}
	root, err := os.OpenRoot(dest)
	if err != nil {
		return res, err
	}
	defer root.Close()
	var mu sync.Mutex
	fail := func(name string, err error) {
		mu.Lock()
		res.Failed = append(res.Failed, CopyError{Path: path.Join(remote, name), Err: err})
		mu.Unlock()
	}
	var files []treeEntry
	for _, e := range entries {
		switch e.info.Type {
		case rpc.FileDir:
			if err := root.Mkdir(e.name, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
				fail(e.name, err)
				continue
			}
			res.Entries++
		case rpc.FileSymlink:
			if err := rpc.CheckLinkTarget(e.name, e.info.Target); err != nil {
				fail(e.name, fmt.Errorf("refused: %v", err))
				continue
			}
			_ = root.Remove(e.name)
			if err := root.Symlink(e.info.Target, e.name); err != nil {
				fail(e.name, err)
				continue
			}
			if err := lchtimesIn(root, e.name, time.Unix(0, e.info.MtimeNs)); err != nil {
				fail(e.name, err)
				continue
			}
			res.Entries++
		case rpc.FileRegular:
			files = append(files, e)
		default:
			fail(e.name, errors.New("not a regular file, directory or symbolic link (a device?): refused"))
		}
	}
	copyEach(opts.Parallel, files, func(e treeEntry) {
		dir, err := openParent(root, e.name)
		if err != nil {
			fail(e.name, err)
			return
		}
		n, err := downloadFile(ctx, c, remote, e.name, path.Join(remote, e.name), e.info, dir, path.Base(e.name), opts)
		dir.Close()
		mu.Lock()
		res.counted(path.Join(remote, e.name), n, err)
		mu.Unlock()
	})
	// Directories last, deepest first: their modes and times, once their
	// contents no longer change them.
	for _, e := range slices.Backward(entries) {
		if e.info.Type == rpc.FileDir {
			setDir(root, e.name, e.info, fail)
		}
	}
	setDir(root, ".", top, fail)
	return res, nil
}

func setDir(root *os.Root, name string, fi rpc.FileInfo, fail func(string, error)) {
	if err := root.Chmod(name, rpc.FileModeOf(fi.FileMode)); err != nil {
		fail(name, err)
	}
	mt := time.Unix(0, fi.MtimeNs)
	if err := root.Chtimes(name, mt, mt); err != nil {
		fail(name, err)
	}
}

// openParent opens the directory of entry name inside root (never
// outside it).
func openParent(root *os.Root, name string) (*os.Root, error) {
	d := path.Dir(name)
	return root.OpenRoot(d)
}

// Upload copies local to the host's remote path: into remote when it is
// an existing directory there, else as remote. With opts.Recursive a
// directory is copied as a tree.
func Upload(ctx context.Context, c *Conn, local, remote string, opts CopyOptions) (CopyResult, error) {
	var res CopyResult
	st, err := os.Stat(local)
	if err != nil {
		return res, err
	}
	dest, entry := remote, ""
	if fi, err := c.StatFile(ctx, remote, false); err == nil && (fi.Type == rpc.FileDir || fi.Type == rpc.FileSymlink) {
		if fi.Type == rpc.FileDir || st.Mode().IsRegular() {
			dest, entry = remote, filepath.Base(local)
		}
	}
	switch {
	case st.Mode().IsRegular():
	case st.IsDir():
		if !opts.Recursive {
			return res, fmt.Errorf("%s is a directory (use -r)", local)
		}
		if entry != "" {
			dest = path.Join(dest, entry)
		}
		return uploadTree(ctx, c, local, dest, st, opts)
	default:
		return res, fmt.Errorf("%s is not a regular file: refused", local)
	}
	if opts.Planned != nil {
		opts.Planned(st.Size())
	}
	n, err := uploadFile(ctx, c, local, dest, entry, opts)
	res.counted(local, n, err)
	return res, nil
}

// uploadFile sends the local file to the host's path (with entry,
// inside it), continuing the partial file the host kept when its prefix
// is ours, trying again while the stream is lost. A file the host already
// holds is not sent (errUnchanged: sameFile), unless opts.Force.
func uploadFile(ctx context.Context, c *Conn, local, remote, entry string, opts CopyOptions) (int64, error) {
	progress := opts.Progress
	f, err := os.Open(local)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	if !st.Mode().IsRegular() {
		return 0, errors.New("not a regular file: refused")
	}
	if !opts.Force {
		name := remote
		if entry != "" {
			name = path.Join(remote, entry)
		}
		if ri, err := c.StatFile(ctx, name, false); err == nil && sameFile(ctx, c, name, ri, f, st) {
			if progress != nil {
				progress(st.Size())
			}
			return 0, errUnchanged
		}
	}
	// A host that takes the sum after the bytes (files/commit) has it
	// hashed while they are sent; an older one needs it up front, a pass
	// over the file before sending.
	sum := ""
	if c.init.Files == nil || !c.init.Files.Commit {
		h := sha256.New()
		if _, err := io.Copy(h, f); err != nil {
			return 0, err
		}
		sum = hex.EncodeToString(h.Sum(nil))
	}
	var total int64
	for try := 0; try < copyAttempts; try++ {
		var n int64
		n, err = uploadOnce(ctx, c, f, st, sum, remote, entry, progress)
		total += n
		if !copyRetryable(err) {
			return total, err
		}
	}
	return total, err
}

// errHostEnded: the host told the outcome of an upload before every
// byte was sent (a full disk): sending stops.
var errHostEnded = errors.New("the host ended the transfer")

// uploadOnce sends f from where the host's partial file ends (when its
// prefix is ours), hashing what it sends on another goroutine when sum is
// not stated at the open (it is then stated by files/commit after the
// bytes), and returns the bytes sent. The host's outcome is read while
// sending: one that comes early (the host could not write the file)
// stops the sending at once.
func uploadOnce(ctx context.Context, c *Conn, f *os.File, st os.FileInfo, sum, remote, entry string, progress func(int64)) (int64, error) {
	size, mode, mt := st.Size(), rpc.WireFileMode(st.Mode()), st.ModTime().UnixNano()
	p := rpc.FilesOpenParams{Path: remote, Entry: entry, Mode: "write", Size: &size, SHA256: sum, FileMode: &mode, MtimeNs: &mt, Resume: true}
	stream, res, err := openWaiting(ctx, c, p)
	if err != nil {
		return 0, err
	}
	h := sha256.New()
	if res.Offset > 0 && !prefixMatches(f, res.Offset, res.PrefixSHA256, h) {
		stream.Reset()
		p.Resume = false
		h.Reset()
		// The reset is a notification: the host may take the new open
		// before it, and find the file still being written; it ends soon.
		for deadline := time.Now().Add(5 * time.Second); ; {
			stream, res, err = openWaiting(ctx, c, p)
			var re *rpc.Error
			if err == nil || !errors.As(err, &re) || re.Code != rpc.CodeAlreadyExists || time.Now().After(deadline) {
				break
			}
			select {
			case <-ctx.Done():
				return 0, ctx.Err()
			case <-time.After(20 * time.Millisecond):
			}
		}
		if err != nil {
			return 0, err
		}
	}
	defer stream.Close()
	if progress != nil && res.Offset > 0 {
		progress(res.Offset)
	}
	type outcome struct {
		why []byte
		err error
	}
	told := make(chan outcome, 1)
	var ended atomic.Bool
	go func() {
		why, err := io.ReadAll(io.LimitReader(stream, 4096))
		ended.Store(true)
		told <- outcome{why, err}
	}()
	var src io.Reader = io.NewSectionReader(f, res.Offset, size-res.Offset)
	var ph *pipehash.Hash
	if sum == "" {
		ph = pipehash.New(h)
		defer ph.Close()
		src = io.TeeReader(src, ph)
	}
	n, err := stream.ReadFrom(stopReader{io.TeeReader(src, progressWriter{progress}), &ended})
	if errors.Is(err, errHostEnded) {
		o := <-told
		if len(o.why) > 0 {
			return n, verifyError{errors.New(string(o.why))}
		}
		if o.err == nil {
			o.err = errors.New("the host ended the transfer before every byte was sent")
		}
		stream.Reset()
		return n, o.err
	}
	if err != nil {
		stream.Reset()
		return n, err
	}
	if err := stream.CloseWrite(); err != nil {
		stream.Reset()
		return n, err
	}
	if sum == "" {
		sum = hex.EncodeToString(ph.Sum())
		if err := c.Call(ctx, rpc.MethodFilesCommit, rpc.FilesCommitParams{Channel: stream.Channel(), SHA256: sum}, nil); err != nil {
			stream.Reset()
			return n, err
		}
	}
	var o outcome
	select {
	case o = <-told:
	case <-ctx.Done():
		stream.Reset()
		return n, ctx.Err()
	}
	if o.err != nil {
		stream.Reset()
		return n, o.err
	}
	if len(o.why) > 0 {
		return n, verifyError{errors.New(string(o.why))}
	}
	return n, nil
}

// stopReader reads r until ended is set, then fails with errHostEnded.
type stopReader struct {
	r     io.Reader
	ended *atomic.Bool
}

func (s stopReader) Read(p []byte) (int, error) {
	if s.ended.Load() {
		return 0, errHostEnded
	}
	return s.r.Read(p)
}

// prefixMatches reports whether f's first n bytes have SHA-256 sum,
// hashing them into h.
func prefixMatches(f *os.File, n int64, sum string, h hash.Hash) bool {
	if _, err := io.Copy(h, io.NewSectionReader(f, 0, n)); err != nil {
		return false
	}
	return hex.EncodeToString(h.Sum(nil)) == sum
}

// uploadTree sends the local directory to dest on the host, entry by
// entry: directories and symbolic links with files/put, files each on
// their own channel (opts.Parallel at once); a device, socket or pipe is
// not copied (named in the result).
func uploadTree(ctx context.Context, c *Conn, local, dest string, top os.FileInfo, opts CopyOptions) (CopyResult, error) {
	var res CopyResult
	type ent struct {
		name string
		fi   os.FileInfo
	}
	var entries []ent
	var planned int64
	err := filepath.WalkDir(local, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			res.Failed = append(res.Failed, CopyError{Path: p, Err: err})
			return nil
		}
		if p == local {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			res.Failed = append(res.Failed, CopyError{Path: p, Err: err})
			return nil
		}
		if IsPartialName(d.Name()) {
			res.Skipped = append(res.Skipped, CopyError{Path: p, Err: errPartialSkipped})
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		rel, _ := filepath.Rel(local, p)
		entries = append(entries, ent{filepath.ToSlash(rel), fi})
		if fi.Mode().IsRegular() {
			planned += fi.Size()
		}
		return nil
	})
	if err != nil {
		return res, err
	}
	if opts.Planned != nil {
		opts.Planned(planned)
	}
	if err := c.PutEntry(ctx, rpc.FilesPutParams{Path: dest, Type: rpc.FileDir}); err != nil {
		return res, err
	}
	var mu sync.Mutex
	fail := func(name string, err error) {
		mu.Lock()
		res.Failed = append(res.Failed, CopyError{Path: filepath.Join(local, name), Err: err})
		mu.Unlock()
	}
	var files []ent
	for _, e := range entries {
		m := e.fi.Mode()
		switch {
		case m.IsDir():
			if err := c.PutEntry(ctx, rpc.FilesPutParams{Path: dest, Entry: e.name, Type: rpc.FileDir}); err != nil {
				fail(e.name, err)
				continue
			}
			res.Entries++
		case m&fs.ModeSymlink != 0:
			target, err := os.Readlink(filepath.Join(local, e.name))
			if err != nil {
				fail(e.name, err)
				continue
			}
			mt := e.fi.ModTime().UnixNano()
			if err := c.PutEntry(ctx, rpc.FilesPutParams{Path: dest, Entry: e.name, Type: rpc.FileSymlink, Target: target, MtimeNs: &mt}); err != nil {
				fail(e.name, err)
				continue
			}
			res.Entries++
		case m.IsRegular():
			files = append(files, e)
		default:
			fail(e.name, errors.New("not a regular file, directory or symbolic link (a device?): not copied"))
		}
	}
	copyEach(opts.Parallel, files, func(e ent) {
		n, err := uploadFile(ctx, c, filepath.Join(local, e.name), dest, e.name, opts)
		mu.Lock()
		res.counted(filepath.Join(local, e.name), n, err)
		mu.Unlock()
	})
	putDir := func(name string, fi os.FileInfo) {
		m, t := rpc.WireFileMode(fi.Mode()), fi.ModTime().UnixNano()
		if err := c.PutEntry(ctx, rpc.FilesPutParams{Path: dest, Entry: name, Type: rpc.FileDir, FileMode: &m, MtimeNs: &t}); err != nil {
			fail(name, err)
		}
	}
	for _, e := range slices.Backward(entries) {
		if e.fi.IsDir() {
			putDir(e.name, e.fi)
		}
	}
	putDir("", top)
	return res, nil
}
