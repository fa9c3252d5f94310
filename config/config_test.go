package config

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func writeFile(t *testing.T, name, src string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// same compares two configs, ignoring where they came from.
func same(a, b *Config) bool {
	x, y := *a, *b
	x.Source, y.Source, x.pos, y.pos = "", "", nil, nil
	return reflect.DeepEqual(x, y)
}

func TestDefault(t *testing.T) {
	c := Default()
	if err := c.Validate(); err != nil {
		t.Fatalf("default does not validate: %v", err)
	}
	if c.Source != DefaultSource {
		t.Errorf("Source = %q", c.Source)
	}
	want := &Config{
		Listener: Listener{Address: "127.0.0.1:4433", Origins: []string{},
			MaxConnections: 1024, MaxConnectionsPerPrincipal: 768, MaxUninitialized: 64, InitializeTimeout: 10 * time.Second},
		Auth: Auth{OIDC: OIDC{Audiences: []string{}, Scopes: []string{"openid", "email", "profile"}, PrincipalClaim: "email",
			GroupsClaim: "groups", Roles: map[string][]string{}, Skew: 30 * time.Second, LoginTimeout: 10 * time.Minute, MaxPendingLogins: 1000}},
		Terminal: Terminal{Login: true, Term: "xterm-256color", ScrollbackBytes: 1 << 20,
			MaxPerClient: 16, MaxTotal: 64, MaxPerPrincipal: 32, MaxPerConnection: 16, Env: map[string]string{"LANG": "C.UTF-8"},
			RecordMaxBytes: 64 << 20, RecordDirMaxBytes: 1 << 30},
		TCP: TCP{Allow: []string{"127.0.0.0/8", "::1/128"}, MaxPerClient: 256, MaxTotal: 1024, MaxPerPrincipal: 512, MaxPerConnection: 256,
			DialTimeout: 10 * time.Second, WindowBytes: 32 << 20, MaximumFrameBytes: 512 << 10, WindowBytesPerClient: 64 << 20},
		Tunnels: Tunnels{MaxEntries: 256, MaxListenersPerPrincipal: 16, MaxConnectionsPerPrincipal: 256, MaxWaiting: 32,
			WaitTimeout: 30 * time.Second},
		Files:     Files{Read: []string{"/"}, Write: []string{"/"}, MaxPerPrincipal: 16, MaxTotal: 64},
		Telemetry: Telemetry{Interval: time.Second, ProcessSignals: true, LogFiles: []string{}, Journal: "auto"},
		Delivery: Delivery{WindowBytes: 262144, MaximumFrameBytes: 16384, MaxMessageBytes: 16 << 20, MaxPartialBytes: 16 << 20,
			TransportQueueFrames: 32, OrdinaryQueueMessages: 1024, ProtectedQueueMessages: 256, WriteTimeout: 30 * time.Second,
			MaxConcurrentRequests: 16, MaxSubscriptions: 256},
		Journal: Journal{MaxBytes: 8 << 20, MaxAge: 2 * time.Hour, ReconnectGrace: 2 * time.Hour},
		Log:     Log{Level: "info", Format: "auto"},
		Preview: Preview{Enabled: true, SessionTTL: 15 * time.Minute, MaxSessions: 256, MaxConnectionsPerPrincipal: 64,
			IdleTimeout: 10 * time.Minute, MaxBodyBytes: 1 << 30, MaxHeaderBytes: 64 << 10},
	}
	if !same(c, want) {
		t.Errorf("Default() =\n%+v\nwant\n%+v", *c, *want)
	}
	// Each call is a fresh copy.
	c.Terminal.Env["X"] = "y"
	c.TCP.Allow[0] = "x"
	if d := Default(); d.Terminal.Env["X"] != "" || d.TCP.Allow[0] != "127.0.0.0/8" {
		t.Error("Default() shares maps or slices between calls")
	}
	if c, err := Load(""); err != nil || !same(c, Default()) {
		t.Errorf(`Load("") = %v, %v`, c, err)
	}
}

// TestExampleMatchesDefault checks that the commented config.hcl at the repository
// root (which is also the embedded default) loads to Default() and sets every attribute
// of the schema.
func TestExampleMatchesDefault(t *testing.T) {
	const example = "../config.hcl"
	c, err := Load(example)
	if err != nil {
		t.Fatal(err)
	}
	if !same(c, Default()) {
		t.Errorf("config.hcl and the default differ:\n%+v\n%+v", *c, *Default())
	}
	for _, file := range []string{example} {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		f, diags := hclparse.NewParser().ParseHCL(src, file)
		if diags.HasErrors() {
			t.Fatal(diags)
		}
		for _, s := range (&Config{}).schema() {
			body := f.Body
			missing := false
			for blk := range strings.SplitSeq(s.block, ".") { // auth.oidc: block oidc in block auth
				if blk == "" {
					break
				}
				content, _, _ := body.PartialContent(&hcl.BodySchema{Blocks: []hcl.BlockHeaderSchema{{Type: blk}}})
				if len(content.Blocks) != 1 {
					t.Errorf("%s: block %s missing", file, s.block)
					missing = true
					break
				}
				body = content.Blocks[0].Body
			}
			if missing {
				continue
			}
			attrs, _ := body.JustAttributes()
			for _, fl := range s.fields {
				if attrs[fl.name] == nil {
					t.Errorf("%s: %s.%s is not shown", file, s.block, fl.name)
				}
			}
		}
	}
}

const full = `
state_dir = "/srv/sidecar"
listener {
  address = "[::]:8443"
  base_path = "/vm1/"
  origins = ["https://app.example.com", "http://localhost:3000"]
  max_connections = 100
  max_connections_per_principal = 50
  max_uninitialized = 5
  initialize_timeout = "3s"
  host_ordinal = 7
  drain_delay = "4s"
}
tls {
  cert_file = "/etc/sidecar/cert.pem"
  key_file  = "/etc/sidecar/key.pem"
}
auth {
  token_file = "/run/secrets/token"
  tokens_file = "/etc/sidecar/tokens.hcl"
  oidc {
    issuer = "https://login.example.com"
    client_id = "sidecar"
    audiences = ["api://sidecar"]
    client_secret_file = "/run/secrets/oidc"
    scopes = ["openid", "email", "groups"]
    redirect_url = "https://vm.example.com/vm1/web/oidc/callback"
    principal_claim = "sub"
    role_claim = "sidecar_role"
    groups_claim = "cognito:groups"
    roles = { owner = ["admins"], user = ["devs", "ops"] }
    default_role = "viewer"
    skew = "1m"
    login_timeout = "2m"
    max_pending_logins = 10
  }
}
terminal {
  shell = "/bin/sh"
  user = "root"
  login = false
  term = "screen"
  scrollback_bytes = 65536
  max_per_client = 2
  max_total = 3
  max_per_principal = 6
  max_per_connection = 7
  env = { FOO = "bar" }
  record_dir = "/var/lib/sidecar/recordings"
  record_input = true
  record_max_bytes = 1000
  record_dir_max_bytes = 2000
}
audit { file = "/var/log/sidecar/audit.log" }
tcp {
  allow = ["10.0.0.0/8", "192.168.1.7"]
  max_per_client = 4
  max_total = 5
  max_per_principal = 8
  max_per_connection = 9
  dial_timeout = "1500ms"
  window_bytes = 65537
  maximum_frame_bytes = 1025
  window_bytes_per_client = 131072
}
tunnels {
  allow_non_loopback = true
  allow_privileged_ports = true
  max_entries = 3
  max_listeners_per_principal = 4
  max_connections_per_principal = 5
  max_waiting = 6
  wait_timeout = "7s"
}
files {
  read = ["/srv", "/tmp"]
  write = ["/tmp"]
  max_per_principal = 3
  max_total = 4
}
telemetry {
  interval        = "250ms"
  process_signals = false
  log_files       = ["/var/log/app/*.log"]
  journal         = "on"
}
delivery {
  window_bytes = 512
  maximum_frame_bytes = 1024
  max_message_bytes = 4096
  max_partial_bytes = 8192
  transport_queue_frames = 8
  ordinary_queue_messages = 9
  protected_queue_messages = 10
  write_timeout = "5s"
  max_concurrent_requests = 9
  max_subscriptions = 12
}
journal {
  max_bytes = 1000
  max_age = "1h"
  reconnect_grace = "30s"
}
log {
  level = "debug"
  format = "json"
}
metrics { listen = "127.0.0.1:9464" }
preview {
  enabled = false
  subdomain = "preview.example.com"
  session_ttl = "5m"
  max_sessions = 3
  max_connections_per_principal = 4
  idle_timeout = "30s"
  max_body_bytes = 1000
  max_header_bytes = 2000
}
role "user" { tcp_allow = ["127.0.0.1:5432", "10.1.0.0/16"] }
role "viewer" { tcp_allow = [] }
`

func TestLoadOverridesEverything(t *testing.T) {
	p := writeFile(t, "full.hcl", full)
	c, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	want := &Config{
		StateDir: "/srv/sidecar",
		Listener: Listener{Address: "[::]:8443", BasePath: "/vm1/", Origins: []string{"https://app.example.com", "http://localhost:3000"},
			MaxConnections: 100, MaxConnectionsPerPrincipal: 50, MaxUninitialized: 5, InitializeTimeout: 3 * time.Second,
			HostOrdinal: 7, DrainDelay: 4 * time.Second},
		TLS: TLS{CertFile: "/etc/sidecar/cert.pem", KeyFile: "/etc/sidecar/key.pem"},
		Auth: Auth{TokenFile: "/run/secrets/token", TokensFile: "/etc/sidecar/tokens.hcl", OIDC: OIDC{Issuer: "https://login.example.com", ClientID: "sidecar",
			Audiences: []string{"api://sidecar"}, ClientSecretFile: "/run/secrets/oidc", Scopes: []string{"openid", "email", "groups"},
			RedirectURL: "https://vm.example.com/vm1/web/oidc/callback", PrincipalClaim: "sub", RoleClaim: "sidecar_role",
			GroupsClaim: "cognito:groups", Roles: map[string][]string{"owner": {"admins"}, "user": {"devs", "ops"}},
			DefaultRole: "viewer", Skew: time.Minute, LoginTimeout: 2 * time.Minute, MaxPendingLogins: 10}},
		Terminal: Terminal{Shell: "/bin/sh", User: "root", Login: false, Term: "screen", ScrollbackBytes: 65536,
			MaxPerClient: 2, MaxTotal: 3, MaxPerPrincipal: 6, MaxPerConnection: 7, Env: map[string]string{"FOO": "bar"},
			RecordDir: "/var/lib/sidecar/recordings", RecordInput: true, RecordMaxBytes: 1000, RecordDirMaxBytes: 2000},
		Audit: Audit{File: "/var/log/sidecar/audit.log"},
		TCP: TCP{Allow: []string{"10.0.0.0/8", "192.168.1.7"}, MaxPerClient: 4, MaxTotal: 5, MaxPerPrincipal: 8, MaxPerConnection: 9,
			DialTimeout: 1500 * time.Millisecond, WindowBytes: 65537, MaximumFrameBytes: 1025, WindowBytesPerClient: 131072},
		Tunnels: Tunnels{AllowNonLoopback: true, AllowPrivilegedPorts: true, MaxEntries: 3, MaxListenersPerPrincipal: 4,
			MaxConnectionsPerPrincipal: 5, MaxWaiting: 6, WaitTimeout: 7 * time.Second},
		Files:     Files{Read: []string{"/srv", "/tmp"}, Write: []string{"/tmp"}, MaxPerPrincipal: 3, MaxTotal: 4},
		Telemetry: Telemetry{Interval: 250 * time.Millisecond, ProcessSignals: false, LogFiles: []string{"/var/log/app/*.log"}, Journal: "on"},
		Delivery: Delivery{WindowBytes: 512, MaximumFrameBytes: 1024, MaxMessageBytes: 4096, MaxPartialBytes: 8192,
			TransportQueueFrames: 8, OrdinaryQueueMessages: 9, ProtectedQueueMessages: 10, WriteTimeout: 5 * time.Second,
			MaxConcurrentRequests: 9, MaxSubscriptions: 12},
		Journal: Journal{MaxBytes: 1000, MaxAge: time.Hour, ReconnectGrace: 30 * time.Second},
		Log:     Log{Level: "debug", Format: "json"},
		Metrics: Metrics{Listen: "127.0.0.1:9464"},
		Preview: Preview{Enabled: false, Subdomain: "preview.example.com", SessionTTL: 5 * time.Minute, MaxSessions: 3,
			MaxConnectionsPerPrincipal: 4, IdleTimeout: 30 * time.Second, MaxBodyBytes: 1000, MaxHeaderBytes: 2000},
		Roles: map[string]RoleLimits{"user": {TCPAllow: []string{"127.0.0.1:5432", "10.1.0.0/16"}}, "viewer": {TCPAllow: []string{}}},
	}
	if !same(c, want) {
		t.Errorf("got\n%+v\nwant\n%+v", *c, *want)
	}
	if c.Source != p {
		t.Errorf("Source = %q, want %q", c.Source, p)
	}
	// Every field of want differs from the default, so the file overrode every one.
	def := reflect.ValueOf(*Default())
	got := reflect.ValueOf(*want)
	for i := 0; i < def.NumField(); i++ {
		name := def.Type().Field(i).Name
		if name == "Source" || name == "pos" || name == "Listening" { // not read from a file
			continue
		}
		sub, dsub := got.Field(i), def.Field(i)
		if sub.Kind() != reflect.Struct {
			if reflect.DeepEqual(sub.Interface(), dsub.Interface()) {
				t.Errorf("%s equals the default", name)
			}
			continue
		}
		for j := 0; j < sub.NumField(); j++ {
			if reflect.DeepEqual(sub.Field(j).Interface(), dsub.Field(j).Interface()) &&
				!(name == "Auth" && sub.Type().Field(j).Name == "Token") { // token and token_file exclude each other
				t.Errorf("%s.%s equals the default", name, sub.Type().Field(j).Name)
			}
		}
	}
}

func TestOIDCErrors(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		want      []string // regexps, one per diagnostic, in order
	}{
		{"ok", `auth {
  oidc {
    issuer = "http://127.0.0.1:5556/dex"
    client_id = "sidecar"
    roles = { owner = ["admins"] }
  }
}
`, nil},
		{"everything wrong", `auth {
  oidc {
    issuer = "http://login.example.com"
    audiences = [""]
    scopes = ["email"]
    redirect_url = "https://vm.example.com/callback"
    principal_claim = ""
    groups_claim = ""
    roles = { admin = ["a"], user = [] }
    default_role = "root"
    skew = "10m"
    login_timeout = "0s"
    max_pending_logins = 0
  }
}
`, []string{
			`oidc\.hcl:3:14: Invalid auth\.oidc\.issuer: "http://login\.example\.com" must be an https:// URL \(http:// only on a loopback host\)`,
			`oidc\.hcl:4:17: Invalid auth\.oidc\.audiences: holds an empty audience`,
			`oidc\.hcl:5:14: Invalid auth\.oidc\.scopes: must include "openid"`,
			`oidc\.hcl:6:20: Invalid auth\.oidc\.redirect_url: .* must be the daemon's callback, https://HOST\[:PORT\]<base path>/web/oidc/callback`,
			`oidc\.hcl:7:23: Invalid auth\.oidc\.principal_claim: must name a claim`,
			`oidc\.hcl:8:20: Invalid auth\.oidc\.groups_claim: must name a claim`,
			`oidc\.hcl:9:13: Invalid auth\.oidc\.roles: unknown role "admin"`,
			`oidc\.hcl:9:13: Invalid auth\.oidc\.roles: user lists no group`,
			`oidc\.hcl:10:20: Invalid auth\.oidc\.default_role: unknown role "root"`,
			`oidc\.hcl:11:12: Invalid auth\.oidc\.skew: must be from 0s to 5m0s`,
			`oidc\.hcl:12:21: Invalid auth\.oidc\.login_timeout: must be a duration greater than 0`,
			`oidc\.hcl:13:26: Invalid auth\.oidc\.max_pending_logins: must be greater than 0`,
		}},
		{"no client", "auth {\n  oidc {\n    issuer = \"https://login.example.com\"\n  }\n}\n",
			[]string{`oidc\.hcl:2:3: Invalid auth\.oidc\.client_id: is needed with an issuer`}},
		{"unknown attribute", "auth {\n  oidc {\n    isuer = \"x\"\n  }\n}\n",
			[]string{`oidc\.hcl:3:5: Unsupported argument: .*Did you mean "issuer"\?`}},
		{"duplicate", "auth {\n  oidc {}\n  oidc {}\n}\n",
			[]string{`oidc\.hcl:3:3: Duplicate auth\.oidc block`}},
		{"not at top", "oidc {}\n", []string{`oidc\.hcl:1:1: Unsupported block type`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Load(writeFile(t, "oidc.hcl", tc.src))
			if tc.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				if c.Auth.OIDC.Issuer != "http://127.0.0.1:5556/dex" || c.Auth.OIDC.Roles["owner"][0] != "admins" || c.Auth.OIDC.Skew != 30*time.Second {
					t.Fatalf("OIDC = %+v", c.Auth.OIDC)
				}
				return
			}
			var cerr *Error
			if !errors.As(err, &cerr) {
				t.Fatalf("Load = %v", err)
			}
			if len(cerr.Diagnostics) != len(tc.want) {
				t.Fatalf("%d diagnostics, want %d:\n%v", len(cerr.Diagnostics), len(tc.want), err)
			}
			for i, re := range tc.want {
				if got := cerr.Diagnostics[i].String(); !regexp.MustCompile(re).MatchString(got) {
					t.Errorf("diagnostic %d = %s\nwant %s", i, got, re)
				}
			}
		})
	}
}

func TestOIDCClientSecret(t *testing.T) {
	o := OIDC{}
	if s, err := o.ClientSecret(); s != "" || err != nil {
		t.Fatalf("no file: %q, %v", s, err)
	}
	o.ClientSecretFile = writeFile(t, "secret", "\n  s3cret \n")
	if s, err := o.ClientSecret(); s != "s3cret" || err != nil {
		t.Fatalf("ClientSecret = %q, %v", s, err)
	}
	o.ClientSecretFile = writeFile(t, "empty", " \n")
	if _, err := o.ClientSecret(); err == nil {
		t.Fatal("empty secret file accepted")
	}
}

func TestLoadPartialKeepsDefaults(t *testing.T) {
	c, err := Load(writeFile(t, "part.hcl", "delivery {\n  window_bytes = 1024\n}\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.Delivery.WindowBytes = 1024
	if !same(c, want) {
		t.Errorf("got %+v", *c)
	}
}

func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name, file, src string
		want            []string // regexps, one per expected diagnostic, in order
	}{
		{"syntax", "bad.hcl", "listener {\n  address = \"127.0.0.1:1\"\n  origins = [\"a\" \"b\"]\n}\n",
			[]string{`bad\.hcl:3:\d+: `}},
		{"unknown attribute", "unknown.hcl", "listener {\n  adress = \"x:1\"\n}\n",
			[]string{`unknown\.hcl:2:3: Unsupported argument: .*Did you mean "address"\?`}},
		{"unknown block", "block.hcl", "\n\nlisteners {\n}\n",
			[]string{`block\.hcl:3:1: Unsupported block type`}},
		{"duplicate block", "dup.hcl", "log {}\nlog {}\n",
			[]string{`dup\.hcl:2:1: Duplicate log block`}},
		{"wrong type", "type.hcl", "tcp {\n  allow = \"127.0.0.1\"\n}\n",
			[]string{`type\.hcl:2:\d+: Invalid tcp\.allow: list of string required`}},
		{"wrong type number", "num.hcl", "tcp {\n  window_bytes = \"lots\"\n}\n",
			[]string{`num\.hcl:2:\d+: Invalid tcp\.window_bytes: a number is required`}},
		{"bad duration", "dur.hcl", "telemetry {\n  interval = \"1 second\"\n}\n",
			[]string{`dur\.hcl:2:14: Invalid duration: telemetry\.interval = "1 second" is not a duration`}},
		{"variables", "var.hcl", "state_dir = env.HOME\n",
			[]string{`var\.hcl:1:13: Variables not allowed`}},
		{"semantic", "frame.hcl", "delivery {\n\n  maximum_frame_bytes = 100\n}\n",
			[]string{`frame\.hcl:3:25: Invalid delivery\.maximum_frame_bytes: must be from 1024 to 524288 UTF-16 bytes .*got 100`}},
		{"partial under message", "partial.hcl", "delivery {\n  max_partial_bytes = 1000\n}\n",
			[]string{`partial\.hcl:2:23: Invalid delivery\.max_partial_bytes: must be at least max_message_bytes \(16777216 UTF-16 bytes\).*got 1000`}},
		{"requests over the protected queue", "requests.hcl", "delivery {\n  max_concurrent_requests = 256\n}\n",
			[]string{`requests\.hcl:2:29: Invalid delivery\.max_concurrent_requests: must be less than protected_queue_messages \(256\).*got 256`}},
		{"zero duration", "zero.hcl", "journal {\n  max_age = \"0s\"\n}\n",
			[]string{`zero\.hcl:2:13: Invalid journal\.max_age: must be a duration greater than 0`}},
		{"tls half", "tls.hcl", "tls {\n  key_file = \"k.pem\"\n}\n",
			[]string{`tls\.hcl:2:14: Invalid tls\.key_file: cert_file and key_file must be set together`}},
		{"terminal per client over total", "term.hcl", "terminal {\n  max_per_client = 10\n  max_total = 5\n}\n",
			[]string{`term\.hcl:2:20: Invalid terminal\.max_per_client: max_per_client \(10 terminals\) is greater than max_total \(5 terminals\)`}},
		{"terminal total under default per client", "total.hcl", "terminal {\n  max_total = 4\n}\n",
			[]string{`total\.hcl:2:15: Invalid terminal\.max_total: max_per_client \(16 terminals\) is greater than max_total \(4 terminals\)`}},
		{"tcp per client over total", "tcp.hcl", "tcp {\n  max_per_client = 300\n  max_total = 200\n}\n",
			[]string{`tcp\.hcl:2:20: Invalid tcp\.max_per_client: max_per_client \(300 connections\) is greater than max_total \(200 connections\)`}},
		{"connections per principal over total", "conns.hcl", "listener {\n  max_connections = 10\n}\n",
			[]string{`conns\.hcl:\d+:\d+: Invalid listener\.max_connections_per_principal: \(768 connections\) is greater than max_connections \(10\)`}},
		{"base path relative", "base.hcl", "listener {\n  base_path = \"vm1/\"\n}\n",
			[]string{`base\.hcl:2:\d+: Invalid listener\.base_path: "vm1/" must start with "/"`}},
		{"uninitialized zero", "uninit.hcl", "listener {\n  max_uninitialized = 0\n}\n",
			[]string{`uninit\.hcl:2:\d+: Invalid listener\.max_uninitialized`}},
		{"shell relative", "shrel.hcl", "terminal {\n  shell = \"bash\"\n}\n",
			[]string{`shrel\.hcl:2:11: Invalid terminal\.shell: "bash" is not an absolute path`}},
		{"shell missing", "shmiss.hcl", "terminal {\n  shell = \"/nonexistent/bin/zsh\"\n}\n",
			[]string{`shmiss\.hcl:2:11: Invalid terminal\.shell: "/nonexistent/bin/zsh": .*no such file or directory`}},
		{"shell directory", "shdir.hcl", "terminal {\n  shell = \"/\"\n}\n",
			[]string{`shdir\.hcl:2:11: Invalid terminal\.shell: "/" is not a regular file`}},
		{"shell not executable", "shexec.hcl", "terminal {\n  shell = \"SHELLFILE\"\n}\n",
			[]string{`shexec\.hcl:2:11: Invalid terminal\.shell: ".*/notexec" is not executable`}},
		{"user unknown", "user.hcl", "terminal {\n  user = \"no-such-user-sidecar\"\n}\n",
			[]string{`user\.hcl:2:10: Invalid terminal\.user: no user "no-such-user-sidecar" on this machine`}},
		{"uid unknown", "uid.hcl", "terminal {\n  user = \"3999999999\"\n}\n",
			[]string{`uid\.hcl:2:10: Invalid terminal\.user: no user "3999999999" on this machine`}},
		{"metrics not host:port", "metrics.hcl", "metrics {\n  listen = \"9464\"\n}\n",
			[]string{`metrics\.hcl:2:12: Invalid metrics\.listen: "9464" is not host:port .*; write for example "127\.0\.0\.1:9464"`}},
		{"metrics port out of range", "mport.hcl", "metrics {\n  listen = \"127.0.0.1:70000\"\n}\n",
			[]string{`mport\.hcl:2:12: Invalid metrics\.listen: port "70000" of "127\.0\.0\.1:70000" is not a number from 0 to 65535`}},
		{"metrics on the listener's port", "msame.hcl", "metrics {\n  listen = \"127.0.0.1:4433\"\n}\n",
			[]string{`msame\.hcl:2:12: Invalid metrics\.listen: "127\.0\.0\.1:4433" is listener\.address too; give the metrics another port`}},
		{"sorted by line", "order.hcl", `log {
  level = "verbose"
}
tcp {
  bogus = 1
}
listener {
  address = "localhost"
}
`, []string{
			`order\.hcl:2:11: Invalid log\.level`,
			`order\.hcl:5:3: Unsupported argument`,
			`order\.hcl:8:13: Invalid listener\.address`,
		}},
		{"several", "several.hcl", `listener {
  address = "localhost"
  origins = ["app.example.com"]
}
auth {
  token = "abc"
  token_file = "/t"
}
tcp {
  allow = ["10.0.0.0/33", "::1"]
  dial_timeout = "-1s"
  bogus = 1
}
delivery {
  transport_queue_frames = 256
  window_bytes = 0
}
log {
  level = "verbose"
  format = "xml"
}
`, []string{
			`several\.hcl:2:13: Invalid listener\.address: "localhost" is not host:port`,
			`several\.hcl:3:13: Invalid listener\.origins: "app\.example\.com" is not an origin`,
			`several\.hcl:7:16: Invalid auth\.token_file: token and token_file are both set`,
			`several\.hcl:10:11: Invalid tcp\.allow: "10\.0\.0\.0/33" is neither a CIDR`,
			`several\.hcl:11:18: Invalid tcp\.dial_timeout: must be a duration greater than 0, got "-1s"`,
			`several\.hcl:12:3: Unsupported argument`,
			`several\.hcl:15:28: Invalid delivery\.transport_queue_frames: must be at most 255`,
			`several\.hcl:16:18: Invalid delivery\.window_bytes: must be greater than 0 UTF-16 bytes, got 0`,
			`several\.hcl:19:11: Invalid log\.level: "verbose"`,
			`several\.hcl:20:12: Invalid log\.format: "xml"`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := tt.src
			if strings.Contains(src, "SHELLFILE") {
				src = strings.ReplaceAll(src, "SHELLFILE", writeFile(t, "notexec", "#!/bin/sh\n"))
			}
			p := writeFile(t, tt.file, src)
			c, err := Load(p)
			if err == nil {
				t.Fatalf("Load succeeded: %+v", c)
			}
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("error %T %v is not *Error", err, err)
			}
			lines := strings.Split(err.Error(), "\n")
			if len(lines) != len(ce.Diagnostics) {
				t.Errorf("Error() has %d lines for %d diagnostics", len(lines), len(ce.Diagnostics))
			}
			if tt.name == "syntax" { // the parser may add more than one diagnostic
				lines = lines[:1]
			}
			if len(lines) != len(tt.want) {
				t.Fatalf("got %d diagnostics, want %d:\n%s", len(lines), len(tt.want), err)
			}
			for i, w := range tt.want {
				if !regexp.MustCompile(`^` + regexp.QuoteMeta(filepath.Dir(p)+"/") + w).MatchString(lines[i]) {
					t.Errorf("diagnostic %d:\n got %s\nwant %s", i, lines[i], w)
				}
			}
			for _, d := range ce.Diagnostics {
				if d.File != p || d.Line == 0 || d.Column == 0 {
					t.Errorf("diagnostic without position: %+v", d)
				}
			}
		})
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "nope.hcl"))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("err = %v, want fs.ErrNotExist", err)
	}
}

func TestLoadJSON(t *testing.T) {
	c, err := Load(writeFile(t, "c.json", `{"log": {"level": "warn"}, "tcp": {"dial_timeout": "3s"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Log.Level != "warn" || c.TCP.DialTimeout != 3*time.Second {
		t.Errorf("got %+v", *c)
	}
}

// TestValidateInCode checks a Config changed in code: the errors have no position.
func TestValidateInCode(t *testing.T) {
	c := Default()
	c.Delivery.MaximumFrameBytes = 100
	c.TCP.MaximumFrameBytes = 1 << 20
	c.Terminal.Env = map[string]string{"A=B": "x"}
	err := c.Validate()
	var ce *Error
	if !errors.As(err, &ce) || len(ce.Diagnostics) != 3 {
		t.Fatalf("err = %v", err)
	}
	for _, d := range ce.Diagnostics {
		if d.File != "" || d.Line != 0 {
			t.Errorf("unexpected position %+v", d)
		}
	}
	if !strings.Contains(err.Error(), "\nInvalid delivery.maximum_frame_bytes: ") ||
		!strings.Contains(err.Error(), "Invalid tcp.maximum_frame_bytes: must be from 1024 to 524288 UTF-16 bytes") {
		t.Errorf("Error() = %q", err)
	}
}

func TestValidateAccepts(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:4433", "[::1]:4433", "0.0.0.0:0", "localhost:80", ":4433"} {
		c := Default()
		c.Listener.Address = addr
		if err := c.Validate(); err != nil {
			t.Errorf("%s: %v", addr, err)
		}
	}
	for _, addr := range []string{"127.0.0.1", "127.0.0.1:65536", "127.0.0.1:x", "a b:1"} {
		c := Default()
		c.Listener.Address = addr
		if err := c.Validate(); err == nil {
			t.Errorf("%s accepted", addr)
		}
	}
}

// TestCleanBasePath checks listener.base_path's normal form and what it
// refuses, and that Validate reports a refused one.
func TestCleanBasePath(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"", ""}, {"/", ""}, {"/vm1", "/vm1"}, {"/vm1/", "/vm1"}, {"/a/b-c_d.e~f", "/a/b-c_d.e~f"}, {"/a/b/", "/a/b"},
	} {
		got, err := CleanBasePath(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("CleanBasePath(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
		c := Default()
		c.Listener.BasePath = tt.in
		if err := c.Validate(); err != nil || c.Listener.BasePathPrefix() != tt.want {
			t.Errorf("base_path %q: Validate %v, prefix %q", tt.in, err, c.Listener.BasePathPrefix())
		}
	}
	for _, tt := range []struct{ in, want string }{
		{"vm1", `must start with "/"`},
		{"/vm1?x=1", "no query"},
		{"/vm1#top", "no query (?) or fragment"},
		{"//vm1", `write "/vm1"`},
		{"/a/../b", `write "/b"`},
		{"/a/./b", `write "/a/b"`},
		{"/a//b/", `write "/a/b"`},
		{"/a b", "white space"},
		{"/a%20b", "unescaped"},
	} {
		_, err := CleanBasePath(tt.in)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("CleanBasePath(%q) = %v; want an error with %q", tt.in, err, tt.want)
		}
		c := Default()
		c.Listener.BasePath = tt.in
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "listener.base_path") {
			t.Errorf("base_path %q: Validate = %v", tt.in, err)
		}
	}
}

// TestValidateMetrics checks metrics.listen on a Config changed in code:
// "" (off) and a host:port are accepted; one that would bind the
// listener's own port is not, whichever host each names.
func TestValidateMetrics(t *testing.T) {
	for _, tt := range []struct {
		listener, metrics string
		ok                bool
	}{
		{"127.0.0.1:4433", "", true},
		{"127.0.0.1:4433", "127.0.0.1:9464", true},
		{"127.0.0.1:4433", "[::1]:9464", true},
		{"127.0.0.1:4433", "0.0.0.0:0", true},
		{"127.0.0.1:0", "127.0.0.1:0", true}, // port 0: two different free ports
		{"127.0.0.1:4433", "10.1.2.3:4433", true},
		{"127.0.0.1:4433", "127.0.0.1:4433", false},
		{"0.0.0.0:4433", "127.0.0.1:4433", false},
		{"127.0.0.1:4433", ":4433", false},
		{"[::]:4433", "10.1.2.3:4433", false},
		{"127.0.0.1:4433", "localhost", false},
		{"127.0.0.1:4433", "127.0.0.1:-1", false},
	} {
		c := Default()
		c.Listener.Address, c.Metrics.Listen = tt.listener, tt.metrics
		err := c.Validate()
		if (err == nil) != tt.ok {
			t.Errorf("listener %q metrics %q: err = %v, want ok %v", tt.listener, tt.metrics, err, tt.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "Invalid metrics.listen: ") {
			t.Errorf("listener %q metrics %q: err = %v, want it about metrics.listen", tt.listener, tt.metrics, err)
		}
	}
}

// TestValidateTerminal checks terminal.shell, terminal.user and the max_per_client <=
// max_total rule on a Config changed in code.
func TestValidateTerminal(t *testing.T) {
	self, err := user.Current()
	if err != nil {
		t.Skip(err)
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip(err)
	}
	sh, _ = filepath.Abs(sh)
	for _, tt := range []struct {
		name string
		edit func(c *Config)
		want string // "" for valid, else a substring of the error
	}{
		{"shell absolute executable", func(c *Config) { c.Terminal.Shell = sh }, ""},
		{"shell relative", func(c *Config) { c.Terminal.Shell = "sh" }, `terminal.shell: "sh" is not an absolute path`},
		{"shell missing", func(c *Config) { c.Terminal.Shell = "/nonexistent/sh" }, "Invalid terminal.shell"},
		{"user by name", func(c *Config) { c.Terminal.User = self.Username }, ""},
		{"user by id", func(c *Config) { c.Terminal.User = self.Uid }, ""},
		{"user unknown", func(c *Config) { c.Terminal.User = "no-such-user-sidecar" }, `terminal.user: no user "no-such-user-sidecar"`},
		{"terminal equal", func(c *Config) { c.Terminal.MaxPerClient, c.Terminal.MaxTotal = 8, 8 }, ""},
		{"terminal over", func(c *Config) { c.Terminal.MaxPerClient, c.Terminal.MaxTotal = 9, 8 }, "Invalid terminal.max_per_client: max_per_client (9 terminals) is greater than max_total (8 terminals)"},
		{"tcp equal", func(c *Config) { c.TCP.MaxPerClient, c.TCP.MaxTotal = 8, 8 }, ""},
		{"tcp over", func(c *Config) { c.TCP.MaxPerClient, c.TCP.MaxTotal = 9, 8 }, "Invalid tcp.max_per_client: max_per_client (9 connections) is greater than max_total (8 connections)"},
		{"tcp window too small", func(c *Config) { c.TCP.WindowBytes = 100 }, "Invalid tcp.window_bytes: must be at least 65536 UTF-16 bytes"},
		{"tcp window smallest", func(c *Config) { c.TCP.WindowBytes, c.TCP.WindowBytesPerClient = 65536, 65536 }, ""},
		{"tcp per client under window", func(c *Config) { c.TCP.WindowBytesPerClient = c.TCP.WindowBytes - 1 }, "Invalid tcp.window_bytes_per_client: must be at least window_bytes (33554432 UTF-16 bytes)"},
		{"log file relative", func(c *Config) { c.Telemetry.LogFiles = []string{"app/*.log"} }, `Invalid telemetry.log_files: "app/*.log" must be an absolute, clean path or glob ("/app/*.log")`},
		{"log file bad glob", func(c *Config) { c.Telemetry.LogFiles = []string{"/var/log/[x.log"} }, `Invalid telemetry.log_files: "/var/log/[x.log" must be an absolute`},
		{"journal mode", func(c *Config) { c.Telemetry.Journal = "yes" }, `Invalid telemetry.journal: must be "auto", "on" or "off", got "yes"`},
		{"zero total reported once", func(c *Config) { c.TCP.MaxTotal = 0 }, "Invalid tcp.max_total: must be greater than 0"},
		{"record dir", func(c *Config) { c.Terminal.RecordDir = "/var/lib/sidecar/rec" }, ""},
		{"record dir relative", func(c *Config) { c.Terminal.RecordDir = "rec" }, `Invalid terminal.record_dir: must be an absolute path, got "rec"`},
		{"record dir under one", func(c *Config) { c.Terminal.RecordMaxBytes, c.Terminal.RecordDirMaxBytes = 10, 9 }, "Invalid terminal.record_dir_max_bytes: must be at least terminal.record_max_bytes (10), got 9"},
		{"record max zero", func(c *Config) { c.Terminal.RecordMaxBytes = 0 }, "Invalid terminal.record_max_bytes: must be greater than 0"},
		{"audit file relative", func(c *Config) { c.Audit.File = "audit.log" }, `Invalid audit.file: must be an absolute path, got "audit.log"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			tt.edit(c)
			err := c.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("Validate: %v", err)
			case tt.want != "" && err == nil:
				t.Errorf("Validate accepted it, want %q", tt.want)
			case tt.want != "" && !strings.Contains(err.Error(), tt.want):
				t.Errorf("Validate: %v\nwant %q", err, tt.want)
			case tt.want != "" && strings.Count(err.Error(), "\n") != 0:
				t.Errorf("Validate: more than one diagnostic: %v", err)
			}
		})
	}
}

func TestResolvedStateDir(t *testing.T) {
	c := Default()
	c.StateDir = "/x"
	if got := c.ResolvedStateDir(); got != "/x" {
		t.Errorf("got %q", got)
	}
	c.StateDir = ""
	t.Setenv("STATE_DIRECTORY", "/var/lib/sidecar-test:/other")
	if got := c.ResolvedStateDir(); got != "/var/lib/sidecar-test" {
		t.Errorf("got %q", got)
	}
	t.Setenv("STATE_DIRECTORY", "")
	t.Setenv("XDG_STATE_HOME", "/xdg")
	want := "/xdg/sidecar"
	if os.Geteuid() == 0 {
		want = "/var/lib/sidecar"
	}
	if got := c.ResolvedStateDir(); got != want {
		t.Errorf("got %q want %q", got, want)
	}
}

func TestResolveToken(t *testing.T) {
	t.Setenv(TokenEnv, "")
	c := Default()
	tok, gen, err := c.ResolveToken()
	if err != nil || !gen || len(tok) != 43 {
		t.Fatalf("generated: %q %v %v", tok, gen, err)
	}
	if b, err := base64.RawURLEncoding.DecodeString(tok); err != nil || len(b) != 32 {
		t.Errorf("token %q is not 32 bytes base64url: %v", tok, err)
	}
	if a, b := NewToken(), NewToken(); a == b {
		t.Error("NewToken repeats")
	}

	// With a tokens file or OIDC, no single token is made up.
	for _, set := range []func(*Config){
		func(c *Config) { c.Auth.TokensFile = "/etc/sidecar/tokens.hcl" },
		func(c *Config) { c.Auth.OIDC.Issuer = "https://login.example.com" },
	} {
		c := Default()
		set(c)
		if tok, gen, err := c.ResolveToken(); tok != "" || gen || err != nil {
			t.Errorf("tokens_file or oidc alone: %q %v %v, want no token", tok, gen, err)
		}
	}

	t.Setenv(TokenEnv, "from-env")
	if tok, gen, err := c.ResolveToken(); tok != "from-env" || gen || err != nil {
		t.Errorf("env: %q %v %v", tok, gen, err)
	}

	c.Auth.TokenFile = writeFile(t, "token", "\n  s3cret-file \n")
	if tok, gen, err := c.ResolveToken(); tok != "s3cret-file" || gen || err != nil {
		t.Errorf("file: %q %v %v", tok, gen, err)
	}
	for name, content := range map[string]string{"empty": " \n", "space": "a b", "big": strings.Repeat("a", MaxTokenFileBytes+1)} {
		c.Auth.TokenFile = writeFile(t, name, content)
		if _, _, err := c.ResolveToken(); err == nil {
			t.Errorf("%s token file accepted", name)
		}
	}
	c.Auth.TokenFile = filepath.Join(t.TempDir(), "missing")
	if _, _, err := c.ResolveToken(); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}

	c.Auth.TokenFile = ""
	c.Auth.Token = "literal"
	if tok, gen, err := c.ResolveToken(); tok != "literal" || gen || err != nil {
		t.Errorf("literal: %q %v %v", tok, gen, err)
	}
}

func TestLogger(t *testing.T) {
	for _, tt := range []struct {
		format   string
		terminal bool
		json     bool
	}{
		{"auto", false, true}, {"auto", true, false}, {"json", true, true}, {"text", false, false},
	} {
		c := Default()
		c.Log.Format = tt.format
		c.Log.Level = "debug"
		var buf bytes.Buffer
		l, err := c.Logger(&buf, tt.terminal)
		if err != nil {
			t.Fatal(err)
		}
		l.Named("wt").Debug("hello", "k", 1)
		l.Trace("hidden")
		var m map[string]any
		isJSON := json.Unmarshal(buf.Bytes(), &m) == nil
		if isJSON != tt.json {
			t.Errorf("%s terminal=%v: output %q", tt.format, tt.terminal, buf.String())
		}
		if !strings.Contains(buf.String(), "sidecar.wt") || strings.Contains(buf.String(), "hidden") {
			t.Errorf("%s: output %q", tt.format, buf.String())
		}
	}
	c := Default()
	c.Log.Level = "verbose"
	if _, err := c.Logger(&bytes.Buffer{}, false); err == nil {
		t.Error("bad level accepted")
	}
}

// FuzzDecode checks that no input makes decoding or validation panic, and that every
// diagnostic of a rejected file carries the file name. It explores only with small
// seeds (each block of full on its own, a few hundred bytes at most) and a cheap
// execution (checkDecode starts from a copy of the defaults decoded once): the fuzzer
// minimizes every input it finds interesting, candidate by candidate, and with
// config.hcl (11 KB) as a seed and Default() (which parses config.hcl, 0.5 ms) in every
// execution it spent whole runs minimizing, 7 execs in 30 s. The whole files are checked
// the same way by TestDecodeWholeFiles.
func FuzzDecode(f *testing.F) {
	for block := range strings.SplitAfterSeq(full, "}\n") {
		if strings.TrimSpace(block) != "" {
			f.Add([]byte(block))
		}
	}
	f.Add([]byte("# a comment\n// another\n/* and a block */\n"))
	f.Add([]byte("delivery {\n  maximum_frame_bytes = 100\n}\n"))
	f.Add([]byte("tcp { allow = [\"::1\", 3] }\nlog {}\nlog {}\n"))
	f.Fuzz(checkDecode)
}

// TestDecodeWholeFiles runs FuzzDecode's check on the embedded config.hcl and on
// full, the inputs too large to be its seeds.
func TestDecodeWholeFiles(t *testing.T) {
	for _, src := range [][]byte{defaultHCL, []byte(full)} {
		checkDecode(t, src)
	}
}

// checkDecode decodes src as a file named fuzz.hcl over the defaults and validates the
// result: no panic, and every diagnostic of a rejected file names the file.
func checkDecode(t *testing.T, src []byte) {
	c := cloneDefault()
	c.Source = "fuzz.hcl"
	c.pos = map[string]hcl.Range{}
	derr, _ := c.decode(src, "fuzz.hcl")
	if derr != nil {
		for _, d := range derr.Diagnostics {
			if d.File != "fuzz.hcl" {
				t.Fatalf("diagnostic without file: %+v", d)
			}
		}
	}
	_ = c.Validate()
}

// defaults is Default(), decoded once for cloneDefault.
var defaults = sync.OnceValue(Default)

// cloneDefault returns a deep copy of Default() without decoding config.hcl again: the
// decoding of a fuzz input then cannot reach the defaults of the next one.
// TestCloneDefaultDeep keeps it deep.
func cloneDefault() *Config {
	c := *defaults()
	c.Listener.Origins = slices.Clone(c.Listener.Origins)
	c.Terminal.Env = maps.Clone(c.Terminal.Env)
	c.TCP.Allow = slices.Clone(c.TCP.Allow)
	c.Files.Read = slices.Clone(c.Files.Read)
	c.Files.Write = slices.Clone(c.Files.Write)
	c.Telemetry.LogFiles = slices.Clone(c.Telemetry.LogFiles)
	c.Listening = slices.Clone(c.Listening)
	c.Auth.OIDC.Audiences = slices.Clone(c.Auth.OIDC.Audiences)
	c.Auth.OIDC.Scopes = slices.Clone(c.Auth.OIDC.Scopes)
	c.Auth.OIDC.Roles = maps.Clone(c.Auth.OIDC.Roles) // empty by default: no group slices to share
	c.Roles = maps.Clone(c.Roles)                     // nil by default: no role blocks
	return &c
}

// TestCloneDefaultDeep: cloneDefault equals Default(), and the only fields of Config
// that refer to memory (slices, maps, pointers) are the ones it copies, so that a new
// one cannot be shared by mistake.
func TestCloneDefaultDeep(t *testing.T) {
	if c := cloneDefault(); !reflect.DeepEqual(c, Default()) {
		t.Fatalf("cloneDefault() = %+v, Default() = %+v", c, Default())
	}
	var refs []string
	var walk func(prefix string, typ reflect.Type)
	walk = func(prefix string, typ reflect.Type) {
		for i := range typ.NumField() {
			f := typ.Field(i)
			switch f.Type.Kind() {
			case reflect.Struct:
				walk(prefix+f.Name+".", f.Type)
			case reflect.Slice, reflect.Map, reflect.Pointer, reflect.Interface, reflect.Chan, reflect.Func:
				refs = append(refs, prefix+f.Name)
			}
		}
	}
	walk("", reflect.TypeFor[Config]())
	// pos is replaced by checkDecode before decoding.
	if want := []string{"Listener.Origins", "Auth.OIDC.Audiences", "Auth.OIDC.Scopes", "Auth.OIDC.Roles", "Terminal.Env", "TCP.Allow", "Files.Read", "Files.Write", "Telemetry.LogFiles", "Roles", "Listening", "pos"}; !slices.Equal(refs, want) {
		t.Errorf("Config's reference fields %v, cloneDefault copies %v: copy the new ones", refs, want)
	}
}

// TestValidateFiles: the files block's paths must be absolute and clean
// (the clean form is suggested), its bounds positive and per principal
// at most the total; a loaded file's diagnostic points at the attribute.
func TestValidateFiles(t *testing.T) {
	for _, tt := range []struct {
		name string
		edit func(c *Config)
		want string // "" for valid, else the whole diagnostic
	}{
		{"defaults", func(*Config) {}, ""},
		{"empty lists refuse everything", func(c *Config) { c.Files.Read, c.Files.Write = []string{}, nil }, ""},
		{"several", func(c *Config) { c.Files.Read, c.Files.Write = []string{"/srv", "/tmp"}, []string{"/tmp"} }, ""},
		{"read relative", func(c *Config) { c.Files.Read = []string{"srv"} }, `Invalid files.read: "srv" must be an absolute, clean path ("/srv")`},
		{"write not clean", func(c *Config) { c.Files.Write = []string{"/srv/../tmp/"} }, `Invalid files.write: "/srv/../tmp/" must be an absolute, clean path ("/tmp")`},
		{"per principal zero", func(c *Config) { c.Files.MaxPerPrincipal = 0 }, "Invalid files.max_per_principal: must be greater than 0 transfers, got 0"},
		{"total negative", func(c *Config) { c.Files.MaxTotal = -1 }, "Invalid files.max_total: must be greater than 0 transfers, got -1"},
		{"per principal equal", func(c *Config) { c.Files.MaxPerPrincipal, c.Files.MaxTotal = 8, 8 }, ""},
		{"per principal over", func(c *Config) { c.Files.MaxPerPrincipal, c.Files.MaxTotal = 9, 8 }, "Invalid files.max_per_principal: max_per_principal (9 transfers) is greater than max_total (8)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			tt.edit(c)
			err := c.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("Validate: %v", err)
			case tt.want != "" && (err == nil || err.Error() != tt.want):
				t.Errorf("Validate: %v\nwant %q", err, tt.want)
			}
		})
	}
	p := writeFile(t, "files.hcl", "files {\n  read = [\"/\"]\n  write = [\"tmp\"]\n}\n")
	_, err := Load(p)
	if want := p + `:3:11: Invalid files.write: "tmp" must be an absolute, clean path ("/tmp")`; err == nil || err.Error() != want {
		t.Errorf("Load: %v\nwant %q", err, want)
	}
}

// listener.host_ordinal: 0..1023, or -1 for a StatefulSet pod's ordinal
// from its host name; anything else is refused with the line.
func TestHostOrdinal(t *testing.T) {
	for _, c := range []struct {
		value string
		bad   string
	}{
		{"0", ""}, {"1023", ""}, {"-1", ""},
		{"1024", "listener.host_ordinal: must be 0..1023"},
		{"-2", "listener.host_ordinal: must be 0..1023"},
	} {
		p := writeFile(t, "o.hcl", "listener {\n  host_ordinal = "+c.value+"\n}\n")
		_, err := Load(p)
		if c.bad == "" && err != nil {
			t.Errorf("%s: %v", c.value, err)
		}
		if c.bad != "" && (err == nil || !strings.Contains(err.Error(), c.bad) || !strings.Contains(err.Error(), ":2:")) {
			t.Errorf("%s: error %v, want %q at line 2", c.value, err, c.bad)
		}
	}
	c := Default()
	c.Listener.HostOrdinal = 12
	if o, err := c.ResolveHostOrdinal("sidecar-3"); o != 12 || err != nil {
		t.Errorf("explicit: %d %v", o, err)
	}
	c.Listener.HostOrdinal = HostOrdinalFromHostname
	for host, want := range map[string]int{"sidecar-3": 3, "web-app-0": 0, "a-1023": 1023} {
		if o, err := c.ResolveHostOrdinal(host); o != want || err != nil {
			t.Errorf("%s: %d %v, want %d", host, o, err, want)
		}
	}
	for _, host := range []string{"sidecar", "sidecar-", "sidecar-x", "sidecar-1024", "sidecar-03", "sidecar-+3"} {
		if o, err := c.ResolveHostOrdinal(host); err == nil {
			t.Errorf("%s: ordinal %d, want an error", host, o)
		}
	}
}

// listener.drain_delay may be 0 (the default) but not negative.
func TestDrainDelay(t *testing.T) {
	if d := Default().Listener.DrainDelay; d != 0 {
		t.Errorf("default drain_delay %v", d)
	}
	p := writeFile(t, "d.hcl", "listener {\n  drain_delay = \"-1s\"\n}\n")
	if _, err := Load(p); err == nil || !strings.Contains(err.Error(), "listener.drain_delay") {
		t.Errorf("negative drain_delay: %v", err)
	}
}

// TestAuthTokensFile: auth.tokens_file is read beside token.
func TestAuthTokensFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "c.hcl")
	if err := os.WriteFile(p, []byte("auth {\n  token = \"abc\"\n  tokens_file = \"/etc/sidecar/tokens.hcl\"\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if c.Auth.TokensFile != "/etc/sidecar/tokens.hcl" || c.Auth.Token != "abc" {
		t.Fatalf("auth: %+v", c.Auth)
	}
}
