"""`BufferedReads` lives in `proctor._reads`, shared with `proctor._http`."""

from .._reads import BufferedReads

__all__ = ["BufferedReads"]
