// Package sidecar holds what is embedded from the repository root: the
// commented config.hcl, which is also the built-in default configuration
// (package config decodes it), so the example and the default cannot drift.
package sidecar

import _ "embed"

// DefaultConfig is config.hcl, the default configuration with a comment on
// every setting.
//
//go:embed config.hcl
var DefaultConfig []byte
