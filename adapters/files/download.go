package files

import (
	"io/fs"
	"os"

	"github.com/sidecar-dev/sidecar/adapters"
	"github.com/sidecar-dev/sidecar/audit"
	"github.com/sidecar-dev/sidecar/auth"
	"github.com/sidecar-dev/sidecar/rpc"
)

// OpenDownload opens the regular file at path (absolute, clean) for
// principal's HTTP download (docs/protocol.md "File downloads"), under
// the same rules as files/open mode read: files.read, and one of the
// files block's transfers (files.max_per_principal, files.max_total)
// held until release is called. The caller closes f before release.
// Errors are the file channel's: -32602 (bad path, not a regular file),
// -32008 (no such file), -32009 (policy, quota, permission).
func (k *Kind) OpenDownload(id auth.Identity, path string) (f *os.File, fi fs.FileInfo, release func(), e *rpc.Error) {
	dir, base, full, e := target(path, "")
	if e != nil {
		return nil, nil, nil, e
	}
	defer dir.Close()
	caller := adapters.Caller{Principal: id.Name, ClientID: "http download", Identity: id}
	if e := k.guard.CheckOn(id, auth.FilesRead, full); e != nil {
		k.env.Record(caller, audit.ActionFilesRead, map[string]any{"file.path": full, "outcome": "denied", "via": "http"})
		return nil, nil, nil, e
	}
	if e := k.pol.Check(full, id.Role, false); e != nil {
		k.env.Record(caller, audit.ActionFilesRead, map[string]any{"file.path": full, "outcome": "denied", "via": "http"})
		return nil, nil, nil, e
	}
	res, e := k.quotas.Reserve(&k.quota, caller)
	if e != nil {
		return nil, nil, nil, e
	}
	f, err := dir.OpenFile(base, os.O_RDONLY|syscallNonblock, 0)
	if err != nil {
		res.Release()
		return nil, nil, nil, fsError(full, err)
	}
	fi, err = f.Stat()
	if err != nil {
		f.Close()
		res.Release()
		return nil, nil, nil, fsError(full, err)
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		res.Release()
		return nil, nil, nil, rpc.Errorf(rpc.CodeInvalidParams, "%s is %s, not a regular file: refused", full, describe(fi.Mode()))
	}
	k.log.Debug("file opened for an HTTP download", "principal", id.Name, "path", full)
	release = func() {
		res.Release()
		k.env.Record(caller, audit.ActionFilesRead, map[string]any{"file.path": full, "file.size": fi.Size(), "outcome": "served", "via": "http"})
	}
	return f, fi, release, nil
}
