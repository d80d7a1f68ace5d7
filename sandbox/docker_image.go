package sandbox

import (
	"context"
	"fmt"

	cerrdefs "github.com/containerd/errdefs"
)

// CheckImage returns an error if the launcher's image is not on the Docker
// host, so that a bridge that may not pull it (PullNever) can say so at
// start-up instead of failing every session.
func (d *Docker) CheckImage(ctx context.Context) error {
	img := d.opts.Image
	_, err := d.cli.ImageInspect(ctx, img)
	switch {
	case err == nil:
		return nil
	case cerrdefs.IsNotFound(err):
		return &OptionError{Field: "Pull", Err: fmt.Errorf(
			"image %s is not on the Docker host and the pull policy is never; build or load it there (docker build -t %s, docker load -i FILE), or let the bridge pull missing images", img, img)}
	default:
		return fmt.Errorf("looking up image %s on the Docker host: %w", img, err)
	}
}
