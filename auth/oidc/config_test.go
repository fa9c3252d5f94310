package oidc

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sidecar-dev/sidecar/auth"
	"github.com/sidecar-dev/sidecar/auth/oidc/oidctest"
	"github.com/sidecar-dev/sidecar/config"
)

// TestFromConfig: block auth.oidc as loaded gives a Verifier that
// accepts the issuer's token with the mapped role, and a sign-in.
func TestFromConfig(t *testing.T) {
	is := oidctest.New("sidecar-web")
	defer is.Close()
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "c.hcl")
	src := `auth {
  oidc {
    issuer = "` + is.URL + `"
    client_id = "sidecar-web"
    client_secret_file = "` + secret + `"
    roles = { viewer = ["guests"] }
  }
}
`
	if err := os.WriteFile(file, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	v, l, err := FromConfig(c.Auth.OIDC, "/vm1", nil)
	if err != nil || v == nil || l == nil {
		t.Fatalf("FromConfig = %v, %v, %v", v, l, err)
	}
	defer v.client.CloseIdleConnections()
	if l.opts.ClientSecret != "s3cret" || l.opts.BasePath != "/vm1" || l.opts.MaxPending != 1000 {
		t.Fatalf("login options %+v", l.opts)
	}
	claims := is.Claims()
	claims["groups"] = []string{"guests"}
	id, err := v.Authenticate(ctx(t), is.Sign(claims))
	if err != nil || id.Role != auth.Viewer || id.Name != "alice@example.com" {
		t.Fatalf("Authenticate = %+v, %v", id, err)
	}

	if v, l, err := FromConfig(config.Default().Auth.OIDC, "", nil); v != nil || l != nil || err != nil {
		t.Fatalf("default (off) = %v, %v, %v", v, l, err)
	}
	c.Auth.OIDC.ClientSecretFile = filepath.Join(dir, "missing")
	if _, _, err := FromConfig(c.Auth.OIDC, "", nil); err == nil || !strings.Contains(err.Error(), "client_secret_file") {
		t.Fatalf("missing secret file: %v", err)
	}
}
