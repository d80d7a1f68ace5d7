package bridge

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
)

// TLS without a reverse proxy (--tls-cert and --tls-key), reloaded on
// SIGHUP (certificates from ACME clients are renewed every few weeks; a
// restart would end every session), and mutual TLS (--tls-client-ca).

// TLSOptions name the files of a TLS listener. CertFile and KeyFile are
// required.
type TLSOptions struct {
	// CertFile and KeyFile hold the PEM certificate (chain) and its key.
	CertFile, KeyFile string
	// ClientCAFile, if not empty, holds the PEM CAs that client
	// certificates must chain to: every client must present one (mutual
	// TLS).
	ClientCAFile string
	// Logger receives what a reload did (nil: slog.Default()).
	Logger *slog.Logger
}

// NewTLSConfig loads the certificate and the client CAs. reload loads the
// certificate again, as on SIGHUP: a reload that fails keeps serving the
// previous certificate, so a half-written renewal never takes the endpoint
// down, and says so in the log. Without o.CertFile TLS is off: all three
// are nil.
func NewTLSConfig(o *TLSOptions) (conf *tls.Config, reload func(), err error) {
	if o.CertFile == "" {
		return nil, nil, nil
	}
	logger := o.Logger
	if logger == nil {
		logger = slog.Default()
	}
	r := &certReloader{certFile: o.CertFile, keyFile: o.KeyFile}
	if err := r.reload(); err != nil {
		return nil, nil, err
	}
	conf = &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: r.getCertificate,
	}
	if o.ClientCAFile != "" {
		pem, err := os.ReadFile(o.ClientCAFile)
		if err != nil {
			return nil, nil, fmt.Errorf("--tls-client-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, nil, fmt.Errorf("--tls-client-ca %s holds no PEM certificate", o.ClientCAFile)
		}
		conf.ClientCAs = pool
		conf.ClientAuth = tls.RequireAndVerifyClientCert
	}

	return conf, func() {
		if err := r.reload(); err != nil {
			logger.Error("TLS certificate not reloaded: still serving the previous one; fix the files and send SIGHUP again", "err", err)
			return
		}
		c := r.cert.Load()
		attrs := []any{"cert", o.CertFile}
		if c.Leaf != nil {
			attrs = append(attrs, "subject", c.Leaf.Subject.String(), "not_after", c.Leaf.NotAfter)
		}
		logger.Info("TLS certificate reloaded", attrs...)
	}, nil
}

// certReloader serves the certificate loaded last.
type certReloader struct {
	certFile, keyFile string
	cert              atomic.Pointer[tls.Certificate]
}

func (r *certReloader) reload() error {
	c, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return fmt.Errorf("loading --tls-cert %s and --tls-key %s: %w", r.certFile, r.keyFile, err)
	}
	r.cert.Store(&c)
	return nil
}

func (r *certReloader) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return r.cert.Load(), nil
}
