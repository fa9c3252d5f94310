package conntypes

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sidecar-dev/sidecar/transport"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestEveryType: each Type's dial reaches its listener, which echoes a
// text both ways, and negotiates binary forms as Binary says.
func TestEveryType(t *testing.T) {
	Run(t, func(t *testing.T, ct Type) {
		dial := ct.Listen(t, func(ctx context.Context, mc transport.MessageConn) {
			defer mc.Close(transport.CloseNormal, "")
			for {
				b, err := mc.ReadMessage(ctx)
				if err != nil {
					return
				}
				if mc.WriteMessage(ctx, b) != nil {
					return
				}
			}
		})
		mc := dial(t)
		if got := transport.CarriesBinary(mc); got != ct.Binary {
			t.Errorf("CarriesBinary = %v, want %v", got, ct.Binary)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		const m = `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"s":"☃"}}`
		if err := mc.WriteMessage(ctx, []byte(m)); err != nil {
			t.Fatal(err)
		}
		if b, err := mc.ReadMessage(ctx); err != nil || string(b) != m {
			t.Fatalf("echo %q %v, want %q", b, err, m)
		}
	})
}
