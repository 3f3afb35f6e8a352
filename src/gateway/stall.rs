//! A connection whose writes may not stall for longer than a limit: a
//! client that stops reading its answer is cut off instead of holding its
//! connection (and the gateway's bound on them) forever. A stall ends only
//! when `PROGRESS` bytes have gone out since it began: the kernel taking a
//! few bytes now and then (a window probe) is not a reader.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

pub struct WriteDeadline<S> {
    inner: S,
    limit: Duration,
    /// Armed while writes make no progress, with the bytes written since.
    stalled: Option<(Pin<Box<tokio::time::Sleep>>, usize)>,
}

/// Bytes that end a stall.
const PROGRESS: usize = 64 << 10;

impl<S> WriteDeadline<S> {
    pub fn new(inner: S, limit: Duration) -> Self {
        WriteDeadline {
            inner,
            limit,
            stalled: None,
        }
    }

    /// After a write came back pending: pending until the limit, then an error.
    fn stall<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        let limit = self.limit;
        let (timer, _) = self
            .stalled
            .get_or_insert_with(|| (Box::pin(tokio::time::sleep(limit)), 0));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("the client read nothing for {} s", limit.as_secs()),
            ))),
            Poll::Pending => Poll::Pending,
        }
    }

    /// After a write: `n` bytes went out, or it is pending.
    fn wrote(
        &mut self,
        cx: &mut Context<'_>,
        p: Poll<io::Result<usize>>,
    ) -> Poll<io::Result<usize>> {
        match p {
            Poll::Pending => self.stall(cx),
            Poll::Ready(Ok(n)) => {
                if let Some((_, since)) = &mut self.stalled {
                    *since += n;
                    if *since >= PROGRESS {
                        self.stalled = None;
                    }
                }
                Poll::Ready(Ok(n))
            }
            failed => failed,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for WriteDeadline<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for WriteDeadline<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let p = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.wrote(cx, p)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let p = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.wrote(cx, p)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match Pin::new(&mut self.inner).poll_flush(cx) {
            Poll::Pending => self.stall(cx),
            done => done,
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
