package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"

	"github.com/sidecar-dev/sidecar/rpc"
)

// ErrFilesNotOffered: the host's initialize result has no files.
var ErrFilesNotOffered = errors.New("client: the host does not offer file transfers (no files in its capabilities)")

// OpenFile opens a file on the host (files/open, docs/protocol.md "File
// channels") on a new ahp-file: channel (p.Channel is set) and subscribes
// to it: the returned stream carries the file from the result's Offset
// (reading), or takes its bytes from there (writing: after CloseWrite
// its Read gives nothing once the file is in place, else the host's
// reason as text). Like a TCPConn it carries on through a reconnect. A
// refusal is an *rpc.Error whose Message names the path and the rule.
func (c *Conn) OpenFile(ctx context.Context, p rpc.FilesOpenParams) (*TCPConn, rpc.FilesOpenResult, error) {
	var res rpc.FilesOpenResult
	if c.init.Files == nil {
		return nil, res, ErrFilesNotOffered
	}
	if c.opts.Ordinary {
		return nil, res, errors.New("client: file transfers need windowed delivery (do not use --ordinary)")
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	p.Channel = rpc.FileScheme + "/" + hex.EncodeToString(b[:])
	select {
	case c.dials <- struct{}{}:
	case <-ctx.Done():
		return nil, res, ctx.Err()
	case <-c.done:
		return nil, res, c.Err()
	}
	err := c.Call(ctx, rpc.MethodFilesOpen, p, &res)
	<-c.dials
	if err != nil {
		return nil, res, err
	}
	t, err := c.subscribeStream(ctx, p.Channel, rpc.FileStream)
	if err != nil {
		return nil, res, err
	}
	return t, res, nil
}

// StatFile describes path on the host (files/stat); with sha256 the
// SHA-256 of a regular file too.
func (c *Conn) StatFile(ctx context.Context, path string, sha256 bool) (rpc.FileInfo, error) {
	var res rpc.FileInfo
	if c.init.Files == nil {
		return res, ErrFilesNotOffered
	}
	err := c.Call(ctx, rpc.MethodFilesStat, rpc.FilesStatParams{Path: path, SHA256: sha256}, &res)
	return res, err
}

// ListDir lists the directory path on the host (files/list), page by
// page, calling fn with each page's entries in name order.
func (c *Conn) ListDir(ctx context.Context, path string, fn func([]rpc.FileInfo) error) error {
	if c.init.Files == nil {
		return ErrFilesNotOffered
	}
	cursor := ""
	for {
		var res rpc.FilesListResult
		if err := c.Call(ctx, rpc.MethodFilesList, rpc.FilesListParams{Path: path, Cursor: cursor}, &res); err != nil {
			return err
		}
		if err := fn(res.Entries); err != nil {
			return err
		}
		if res.Next == "" || res.Next <= cursor {
			return nil
		}
		cursor = res.Next
	}
}

// PutEntry creates a directory or a symbolic link on the host
// (files/put).
func (c *Conn) PutEntry(ctx context.Context, p rpc.FilesPutParams) error {
	if c.init.Files == nil {
		return ErrFilesNotOffered
	}
	return c.Call(ctx, rpc.MethodFilesPut, p, nil)
}
