package host_test

import (
	"strings"
	"testing"

	"github.com/sidecar-dev/sidecar/adapters/pty"
	"github.com/sidecar-dev/sidecar/rpc"
)

// TestCreateTerminalBadEnv (issue 27 item 15): createTerminal with an
// environment exec cannot take, or a command too large for exec, is
// answered -32602 (it was -32603 with exec's raw "argument list too
// long", or "pty: invalid environment variable"), naming the variable
// and the rule; nothing is started or reserved, so the same channel is
// then created.
func TestCreateTerminalBadEnv(t *testing.T) {
	t.Parallel()
	srv := newServer(t, nil)
	hc := connect(t, srv)
	hc.initialize("env")
	const ch = "ahp-terminal:/env"
	big := strings.Repeat("v", 1<<20)
	huge := map[string]string{}
	for _, k := range []string{"A", "B", "C", "D", "E", "F", "G", "H", "I", "J"} {
		huge[k] = strings.Repeat("v", 100_000)
	}
	const rule = `a name must be non-empty, without "=" or NUL`
	for _, c := range []struct {
		what    string
		command []string
		env     map[string]string
		want    string
	}{
		{"= in a name", nil, map[string]string{"A=B": "c"}, `invalid params: "env": variable name "A=B" contains "=": ` + rule},
		{"an empty name", nil, map[string]string{"": "c"}, `invalid params: "env": a variable name is empty: ` + rule},
		{"NUL in a name", nil, map[string]string{"A\x00": "c"}, `invalid params: "env": variable name "A\x00" contains NUL: ` + rule},
		{"NUL in a value", nil, map[string]string{"V": "a\x00b"}, `invalid params: "env": the value of "V" contains NUL: a value must not`},
		{"a variable of 1 MB", nil, map[string]string{"BIG": big}, `invalid params: "env": variable "BIG" is 1048580 bytes as NAME=value: one may be at most 131071`},
		{"1 MB in all", nil, huge, `invalid params: "env": the environment is 1000030 bytes (10 variables as NAME=value, each with a NUL; the largest "A", 100002 bytes): at most 262144 in all`},
		{"an argument of 1 MB", []string{"/bin/true", big}, nil, `invalid params: "command" and "env" are too large to start a program: `},
	} {
		e := hc.callErr(rpc.MethodCreateTerminal, rpc.CreateTerminalParams{Channel: ch, Command: c.command, Env: c.env}, rpc.CodeInvalidParams)
		if !strings.HasPrefix(e.Message, c.want) || (c.command == nil && e.Message != c.want) {
			t.Errorf("%s: %q, want %q", c.what, e.Message, c.want)
		}
		if len(e.Message) > rpc.MaxErrorMessageBytes {
			t.Errorf("%s: a message of %d bytes", c.what, len(e.Message))
		}
	}
	ok := map[string]string{"OK": strings.Repeat("v", pty.MaxEnvEntryBytes-3)}
	hc.mustCall(rpc.MethodCreateTerminal, rpc.CreateTerminalParams{Channel: ch, Command: []string{"sleep", "30"}, Env: ok})
}
