// Package tlscert provides the sidecar's TLS certificates: a self-signed development
// certificate kept in the state directory and renewed before it expires, loading of
// real certificates, and certificate pinning (SHA-256 of the leaf's DER), which is how
// clients trust a development certificate (--cert-hash / SIDECAR_CERT_HASH).
package tlscert

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

const (
	// DevValidity is the whole validity period of a development certificate, NotBefore
	// to NotAfter. Browsers accept a certificate pinned through WebTransport's
	// serverCertificateHashes only when that period is at most 14 days.
	DevValidity = 14 * 24 * time.Hour
	// DevBackdate is how far NotBefore lies before creation, for clocks that lag.
	DevBackdate = time.Hour
	// DevRenewBefore: a development certificate with less validity left than this is
	// replaced, so that a daemon started now keeps a valid certificate for a day.
	DevRenewBefore = 24 * time.Hour

	// CertFileName and KeyFileName are the files LoadOrCreateDev keeps in its directory.
	CertFileName = "cert.pem"
	KeyFileName  = "key.pem"
)

// devNames are the names every development certificate covers.
var devNames = []string{"127.0.0.1", "::1", "localhost"}

// LoadOrCreateDev returns the development certificate kept in dir (cert.pem, and key.pem
// with mode 0600; dir is created with mode 0700 if missing). The certificate is ECDSA
// P-256, self-signed, valid from now-1h for 14 days (until now+13d23h), with SANs 127.0.0.1, ::1, localhost
// and every entry of hosts (an IP address becomes an IP SAN, anything else a DNS SAN).
// The stored one is reused unless it is unreadable or does not match its key, has less
// than 24h of validity left at now (or is not yet valid), or lacks one of those SANs; it
// is then regenerated and the files replaced (each written to a temporary file and
// renamed). The returned certificate has Leaf set. Errors come from creating dir or
// writing the files.
func LoadOrCreateDev(dir string, hosts []string, now time.Time) (tls.Certificate, error) {
	names := append(append([]string(nil), devNames...), hosts...)
	certPath, keyPath := filepath.Join(dir, CertFileName), filepath.Join(dir, KeyFileName)

	if cert, err := Load(certPath, keyPath); err == nil && devUsable(cert.Leaf, names, now) {
		return cert, nil
	}

	if err := os.MkdirAll(dir, 0o700); err != nil {
		return tls.Certificate{}, fmt.Errorf("tlscert: state directory: %w", err)
	}
	certPEM, keyPEM, err := generate(names, now)
	if err != nil {
		return tls.Certificate{}, err
	}
	// Key first: a crash between the two renames leaves a pair that does not match,
	// which the next start detects and regenerates.
	if err := writeAtomic(keyPath, keyPEM, 0o600); err != nil {
		return tls.Certificate{}, err
	}
	if err := writeAtomic(certPath, certPEM, 0o644); err != nil {
		return tls.Certificate{}, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("tlscert: generated pair: %w", err)
	}
	return withLeaf(cert)
}

// devUsable reports whether leaf covers every name and stays valid for DevRenewBefore.
func devUsable(leaf *x509.Certificate, names []string, now time.Time) bool {
	if now.Before(leaf.NotBefore) || leaf.NotAfter.Sub(now) < DevRenewBefore {
		return false
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			found := false
			for _, have := range leaf.IPAddresses {
				found = found || have.Equal(ip)
			}
			if !found {
				return false
			}
		} else if leaf.VerifyHostname(n) != nil {
			return false
		}
	}
	return true
}

func generate(names []string, now time.Time) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("tlscert: key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, fmt.Errorf("tlscert: serial: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{Organization: []string{"sidecar"}, CommonName: "sidecar development certificate"},
		NotBefore:             now.Add(-DevBackdate),
		NotAfter:              now.Add(-DevBackdate).Add(DevValidity),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	seen := map[string]bool{}
	for _, n := range names {
		if n == "" || seen[n] {
			continue
		}
		seen[n] = true
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("tlscert: certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("tlscert: key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), nil
}

// writeAtomic replaces path with data, so that a reader sees the old or the new file.
func writeAtomic(path string, data []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("tlscert: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // fails harmlessly after the rename
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return fmt.Errorf("tlscert: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("tlscert: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("tlscert: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("tlscert: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("tlscert: %w", err)
	}
	return nil
}

// Load reads a PEM certificate chain and its private key (tls.LoadX509KeyPair) and
// returns them with Leaf set. Errors name the files.
func Load(certFile, keyFile string) (tls.Certificate, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("tlscert: load %s and %s: %w", certFile, keyFile, err)
	}
	return withLeaf(cert)
}

func withLeaf(cert tls.Certificate) (tls.Certificate, error) {
	if cert.Leaf != nil {
		return cert, nil
	}
	if len(cert.Certificate) == 0 {
		return tls.Certificate{}, errors.New("tlscert: no certificate in chain")
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("tlscert: parse leaf: %w", err)
	}
	cert.Leaf = leaf
	return cert, nil
}

// Pin returns the SHA-256 of the leaf certificate's DER (cert.Certificate[0]) as 64
// lowercase hex characters: what clients pass as --cert-hash. It returns "" for a
// certificate with an empty chain.
func Pin(cert tls.Certificate) string {
	if len(cert.Certificate) == 0 {
		return ""
	}
	sum := sha256.Sum256(cert.Certificate[0])
	return hex.EncodeToString(sum[:])
}

// ParsePin parses a certificate pin: 64 hex digits in any case, optionally separated
// by colons ("AB:CD:..."), optionally prefixed with "sha256:" or "sha256/", with white
// space around ignored. It returns the 32 bytes of the SHA-256, or an error saying what
// is wrong.
func ParsePin(s string) ([]byte, error) {
	h := strings.TrimSpace(s)
	for _, p := range []string{"sha256:", "sha256/", "sha-256:"} {
		if len(h) >= len(p) && strings.EqualFold(h[:len(p)], p) {
			h = h[len(p):]
			break
		}
	}
	h = strings.ReplaceAll(h, ":", "")
	b, err := hex.DecodeString(h)
	if err != nil {
		return nil, fmt.Errorf("tlscert: invalid certificate pin %q: not hexadecimal; want the 64 hex digits of a SHA-256 (as printed by sidecar cert)", s)
	}
	if len(b) != sha256.Size {
		return nil, fmt.Errorf("tlscert: invalid certificate pin %q: %d bytes, want the 32 bytes (64 hex digits) of a SHA-256", s, len(b))
	}
	return b, nil
}

// VerifyPin returns a function for tls.Config.VerifyPeerCertificate that accepts the
// peer exactly when the SHA-256 of its leaf certificate's DER (rawCerts[0]) equals pin,
// and otherwise returns "certificate pin mismatch: server presented sha256 <hex>,
// expected <hex>". Chain and name are not checked, so use it with InsecureSkipVerify
// set (the pin is the whole trust decision).
func VerifyPin(pin []byte) func(rawCerts [][]byte, _ [][]*x509.Certificate) error {
	want := bytes.Clone(pin)
	return func(rawCerts [][]byte, _ [][]*x509.Certificate) error {
		if len(rawCerts) == 0 {
			return fmt.Errorf("certificate pin mismatch: server presented no certificate, expected %x", want)
		}
		got := sha256.Sum256(rawCerts[0])
		if subtle.ConstantTimeCompare(got[:], want) != 1 {
			return fmt.Errorf("certificate pin mismatch: server presented sha256 %x, expected %x", got[:], want)
		}
		return nil
	}
}
