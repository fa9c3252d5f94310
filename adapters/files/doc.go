// Package files is the file channel kind (ahp-file:/<id>, docs/protocol.md
// "File channels"), the first kind added on the registry after the
// built-in ones: files/open opens a file for reading or writing on a new
// channel, which is a byte stream like a TCP channel (adapters/tcp's
// Channel over an Endpoint that is the file: windowed, counted and
// credited per seed 000, resumed by offsets across a reconnect), and
// files/stat, files/list (bounded pages) and files/put (directories,
// symbolic links) serve tree copies and file browsers.
//
// Writes land in a partial file beside the target (".<name>.sidecar-part")
// and are renamed onto it only once the size and SHA-256 the sender stated
// match; a transfer cut short leaves the partial file, which a later
// files/open with resume continues. Every path is checked against the
// files block's policy (read, write) after symbolic links are resolved,
// and every name of a tree copy against hostile names (rpc.CheckEntry,
// rpc.CheckLinkTarget, and an os.Root that refuses to leave the
// destination); each refusal names the path and the rule.
package files
