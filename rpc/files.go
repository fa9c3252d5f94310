package rpc

import (
	"errors"
	"fmt"
	"os"
	"path"
	"strings"
)

// The file channel (docs/protocol.md "File channels"): our extension,
// advertised as "files" in the initialize result. A file channel
// (ahp-file:/<id>) is a byte stream carrying the TCP channel's messages
// (tcp/data, tcp/eof, tcp/reset: TCPStream), so that their binary form
// and the resume by offsets apply unchanged.

const (
	// FileScheme prefixes file channel URIs: ahp-file:/<id>.
	FileScheme = "ahp-file:"
	// MethodFilesOpen opens a file for reading or writing on a new file
	// channel, which the caller then subscribes to (windowed).
	MethodFilesOpen = "files/open"
	// MethodFilesStat describes one path.
	MethodFilesStat = "files/stat"
	// MethodFilesList lists a directory, one bounded page at a time.
	MethodFilesList = "files/list"
	// MethodFilesPut creates a directory or a symbolic link.
	MethodFilesPut = "files/put"
	// MethodFilesCommit states the SHA-256 of a file being written, once
	// the writer has sent it all (FilesCommitParams).
	MethodFilesCommit = "files/commit"
)

// FileStream is the file channel's stream methods: the TCP channel's.
var FileStream = TCPStream

// File types (FileInfo.Type).
const (
	FileRegular = "file"
	FileDir     = "dir"
	FileSymlink = "symlink"
	// FileOther is a device, socket or pipe: never copied.
	FileOther = "other"
)

// FilesCapability advertises the file channel (initialize result
// "files"). MaxListEntries is the most entries one files/list page
// holds.
type FilesCapability struct {
	MaxListEntries int `json:"maxListEntries"`
	// Commit: files/open for writing takes no sha256, stated later by
	// files/commit (a host without it needs the sum up front).
	Commit bool `json:"commit,omitempty"`
}

// FilesCommitParams is files/commit: the SHA-256 (64 lowercase hex
// digits) of the whole file written on Channel, a write channel of the
// caller's opened without sha256. The host renames the partial file
// into place once it has this sum and the channel's tcp/eof, in either
// order; the outcome comes on the channel as for a sum stated at open.
// Its result is {} once the sum is taken.
type FilesCommitParams struct {
	Channel string `json:"channel"`
	SHA256  string `json:"sha256"`
}

// FilesOpenParams is files/open. Path is absolute; with Entry (a
// relative name of a tree copy, checked for hostile names) the file is
// Entry inside the directory Path. Mode is "read" or "write".
//
// Reading: Prefix, when the caller holds the file's first bytes (a
// partial download), says how many and their SHA-256; when the host's
// file begins with them the stream starts past them.
//
// Writing: Size and SHA256 (hex) are what the caller will send in full
// (SHA256 may be left out and stated by files/commit after the bytes,
// where FilesCapability.Commit says so: the sender then hashes while
// sending instead of reading the file once more before),
// FileMode (permission bits) and MtimeNs (Unix nanoseconds) what the
// file gets. The bytes land in a partial file beside the target
// (".<name>.sidecar-part"), renamed onto it once Size bytes with that
// SHA-256 were written. Resume continues a partial file left by an
// earlier transfer; the result says from where.
type FilesOpenParams struct {
	Channel  string       `json:"channel"`
	Path     string       `json:"path"`
	Entry    string       `json:"entry,omitempty"`
	Mode     string       `json:"mode"`
	Prefix   *FilesPrefix `json:"prefix,omitempty"`
	Size     *int64       `json:"size,omitempty"`
	SHA256   string       `json:"sha256,omitempty"`
	FileMode *uint32      `json:"fileMode,omitempty"`
	MtimeNs  *int64       `json:"mtimeNs,omitempty"`
	Resume   bool         `json:"resume,omitempty"`
}

// FilesPrefix is a file's first Size bytes, by their SHA-256 (hex).
type FilesPrefix struct {
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// FilesOpenResult answers files/open. Offset is where in the file the
// channel's stream begins (its stream offset 0). Reading: the file's
// Size, FileMode and MtimeNs at open. Writing: Offset bytes of a partial
// file are kept, whose SHA-256 is PrefixSHA256; the caller that finds
// they differ from its own resets the channel and opens again without
// Resume.
type FilesOpenResult struct {
	Offset       int64  `json:"offset"`
	Size         int64  `json:"size"`
	FileMode     uint32 `json:"fileMode"`
	MtimeNs      int64  `json:"mtimeNs"`
	PrefixSHA256 string `json:"prefixSha256,omitempty"`
}

// FilesStatParams is files/stat: Path (absolute; a symbolic link is
// described, not followed). With SHA256 the result has the regular
// file's SHA-256. With SHA256 and Channel, a file channel of this client
// that read Path to its end, the SHA-256 is of the bytes that channel
// sent (hashed as they were read, so the file is not read again), when
// the file's size and modification time did not change meanwhile; else
// the file is hashed now.
type FilesStatParams struct {
	Path    string `json:"path"`
	SHA256  bool   `json:"sha256,omitempty"`
	Channel string `json:"channel,omitempty"`
}

// FileInfo describes one file: its Name (in a listing; the base name in
// files/stat), Type (FileRegular, FileDir, FileSymlink, FileOther),
// Size (bytes), FileMode (permission bits, with setuid, setgid and
// sticky as in chmod), MtimeNs (Unix nanoseconds), Target (a symbolic
// link's), SHA256 (hex, files/stat with sha256).
type FileInfo struct {
	Name     string `json:"name"`
	Type     string `json:"type"`
	Size     int64  `json:"size"`
	FileMode uint32 `json:"fileMode"`
	MtimeNs  int64  `json:"mtimeNs"`
	Target   string `json:"target,omitempty"`
	SHA256   string `json:"sha256,omitempty"`
}

// FilesListParams is files/list: the entries of directory Path whose
// names sort after Cursor (byte order), at most Limit (at most, and by
// default, FilesCapability.MaxListEntries).
type FilesListParams struct {
	Path   string `json:"path"`
	Cursor string `json:"cursor,omitempty"`
	Limit  int    `json:"limit,omitempty"`
}

// FilesListResult is one page of a listing, in name order; Next, when
// set, is the Cursor of the next page.
type FilesListResult struct {
	Entries []FileInfo `json:"entries"`
	Next    string     `json:"next,omitempty"`
}

// FilesPutParams is files/put: create Entry inside directory Path (or
// Path itself, without Entry) as a directory (Type FileDir: made if
// missing, then given FileMode and MtimeNs) or a symbolic link to
// Target (FileSymlink: a Target that would lead out of Path is
// refused; MtimeNs is the link's own, not its target's).
type FilesPutParams struct {
	Path     string  `json:"path"`
	Entry    string  `json:"entry,omitempty"`
	Type     string  `json:"type"`
	FileMode *uint32 `json:"fileMode,omitempty"`
	MtimeNs  *int64  `json:"mtimeNs,omitempty"`
	Target   string  `json:"target,omitempty"`
}

// CheckEntry reports why name cannot be an entry of a tree copy (a
// relative name inside the destination, '/'-separated), nil if it can:
// the receiver of a tree, whichever end it is, refuses an empty or
// absolute name, a "." or ".." component, an empty component, and NUL.
func CheckEntry(name string) error {
	switch {
	case name == "":
		return errors.New("an empty name")
	case strings.HasPrefix(name, "/"):
		return fmt.Errorf("%q is absolute", name)
	case strings.IndexByte(name, 0) >= 0:
		return fmt.Errorf("%q holds a NUL byte", name)
	}
	for c := range strings.SplitSeq(name, "/") {
		switch c {
		case "":
			return fmt.Errorf("%q has an empty component", name)
		case ".", "..":
			return fmt.Errorf("%q has a %q component", name, c)
		}
	}
	return nil
}

// CheckLinkTarget reports why a symbolic link entry (CheckEntry) to
// target would lead out of the destination, nil if it stays inside: an
// absolute target, or one whose ".." climb above the destination from
// the entry's directory.
func CheckLinkTarget(entry, target string) error {
	if target == "" || strings.IndexByte(target, 0) >= 0 {
		return fmt.Errorf("symbolic link %q has an empty or invalid target", entry)
	}
	if path.IsAbs(target) {
		return fmt.Errorf("symbolic link %q points to the absolute path %q, outside the destination", entry, target)
	}
	if j := path.Join(path.Dir(entry), target); j == ".." || strings.HasPrefix(j, "../") {
		return fmt.Errorf("symbolic link %q points to %q, outside the destination", entry, target)
	}
	return nil
}

// FileModeOf is a wire mode (FileMode: permission bits, setuid 04000,
// setgid 02000, sticky 01000) as an os.FileMode; other bits are dropped.
func FileModeOf(m uint32) os.FileMode {
	mode := os.FileMode(m & 0o777)
	if m&0o4000 != 0 {
		mode |= os.ModeSetuid
	}
	if m&0o2000 != 0 {
		mode |= os.ModeSetgid
	}
	if m&0o1000 != 0 {
		mode |= os.ModeSticky
	}
	return mode
}

// WireFileMode is m's permission, setuid, setgid and sticky bits as a
// wire mode (FileModeOf's inverse).
func WireFileMode(m os.FileMode) uint32 {
	b := uint32(m.Perm())
	if m&os.ModeSetuid != 0 {
		b |= 0o4000
	}
	if m&os.ModeSetgid != 0 {
		b |= 0o2000
	}
	if m&os.ModeSticky != 0 {
		b |= 0o1000
	}
	return b
}
