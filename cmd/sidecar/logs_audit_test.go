package main

import (
	"testing"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
)

// TestAuditText: an identified event reads "principal (role): action";
// an anonymous one (an auth.failure) is named by its peer address, or
// "-" without one, never "(): ".
func TestAuditText(t *testing.T) {
	str := func(k, v string) *commonpb.KeyValue {
		return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}}
	}
	rec := func(body string, kvs ...*commonpb.KeyValue) *logspb.LogRecord {
		return &logspb.LogRecord{Body: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: body}}, Attributes: kvs}
	}
	for _, tc := range []struct {
		r    *logspb.LogRecord
		want string
	}{
		{rec("terminal.create", str("enduser.id", "alice"), str("enduser.role", "user"), str("terminal", "ahp-terminal:/t")), `alice (user): terminal.create terminal="ahp-terminal:/t"`},
		{rec("auth.failure", str("reason", "unauthorized"), str("network.peer.address", "127.0.0.1:5000")), `127.0.0.1:5000: auth.failure reason="unauthorized" network.peer.address="127.0.0.1:5000"`},
		{rec("auth.failure", str("reason", "unauthorized")), `-: auth.failure reason="unauthorized"`},
	} {
		if got := auditText(tc.r); got != tc.want {
			t.Errorf("auditText: %q, want %q", got, tc.want)
		}
	}
}
