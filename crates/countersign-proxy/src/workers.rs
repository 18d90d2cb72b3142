//! The connection workers: one single-threaded tokio runtime per core, each with its own event
//! loop and timers, and every accepted connection living on one of them from its first byte to
//! its last — the model of nginx's worker processes, Pingora's no-steal runtimes and actix-web's
//! workers.
//!
//! Why not tokio's multi-threaded runtime: a forwarded call wakes a task at least four times
//! (the client connection, the upstream connection, and back), and the work-stealing scheduler
//! makes every wake-up an atomic hand-off that may unpark another thread. On one thread a wake-up
//! is a push onto a local queue. Measured with `bench/yardstick.sh` (pinned, one worker, the
//! same build): 15–50 % more read calls per second on the same core.
//!
//! The trade is the one nginx makes: no work stealing. A connection busy with a long parse holds
//! up the other connections of its worker, not those of the others. New connections go to the
//! worker with the fewest open, so a busy worker does not keep getting more.
//!
//! The calling runtime is worker 0: it accepts, and runs everything that is not a client
//! connection (the admin listener, background refreshes, the shared Redis connections; each
//! worker spends confirmations over a Redis connection of its own, see `countersign-store`).

use std::cell::Cell;
use std::future::Future;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::net::TcpStream;
use tokio::runtime::Handle;
use tokio::sync::oneshot;
use tracing::warn;

thread_local! {
    /// The worker whose thread this is; 0 for any thread not started here.
    static INDEX: Cell<usize> = const { Cell::new(0) };
}

/// The worker the calling thread belongs to: 0 for the runtime that started the workers and for
/// any thread that is not a worker. Keys per-worker state such as idle upstream connections, so
/// that a request reuses a connection driven by its own thread.
pub(crate) fn current_index() -> usize {
    INDEX.with(Cell::get)
}

/// The default number of workers: `TOKIO_WORKER_THREADS` when it is a positive number, else the
/// CPUs this process may use (which honours a container's CPU quota).
pub fn default_count() -> NonZeroUsize {
    std::env::var("TOKIO_WORKER_THREADS")
        .ok()
        .and_then(|value| value.trim().parse().ok())
        .or_else(|| std::thread::available_parallelism().ok())
        .unwrap_or(NonZeroUsize::MIN)
}

/// The runtimes client connections are spread over.
#[derive(Debug)]
pub struct Workers {
    workers: Vec<Worker>,
    /// Where the last tie for fewest open connections was broken: ties go round the workers.
    next: AtomicUsize,
}

#[derive(Debug)]
struct Worker {
    handle: Handle,
    open: Arc<AtomicUsize>,
    /// Dropping it ends the worker's thread; `None` for worker 0, the caller's runtime.
    _stop: Option<oneshot::Sender<()>>,
}

impl Workers {
    /// The calling runtime as worker 0 and `count - 1` more, each on a thread of its own.
    /// Must be called from within a tokio runtime.
    pub fn start(count: NonZeroUsize) -> std::io::Result<Self> {
        let mut workers = vec![Worker::new(Handle::current(), None)];
        for index in 1..count.get() {
            let (handle, stop) = spawn_worker(index)?;
            workers.push(Worker::new(handle, Some(stop)));
        }
        Ok(Self {
            workers,
            next: AtomicUsize::new(0),
        })
    }

    /// How many workers there are.
    pub fn count(&self) -> usize {
        self.workers.len()
    }

    /// Runs `serve(stream)` on the worker with the fewest open connections.
    pub(crate) fn spawn_connection<F, Fut>(&self, stream: TcpStream, serve: F)
    where
        F: FnOnce(TcpStream) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let index = self.pick();
        let worker = &self.workers[index];
        let open = OpenGuard::new(worker.open.clone());
        if index == 0 {
            // Already registered with this runtime's event loop.
            worker.handle.spawn(async move {
                serve(stream).await;
                drop(open);
            });
            return;
        }
        // A socket belongs to the event loop that registered it: hand it over as a plain socket
        // and register it again on the worker's thread.
        let stream = match stream.into_std() {
            Ok(stream) => stream,
            Err(error) => {
                warn!(%error, "could not hand a connection to its worker");
                return;
            }
        };
        worker.handle.spawn(async move {
            match TcpStream::from_std(stream) {
                Ok(stream) => serve(stream).await,
                Err(error) => warn!(%error, "could not register a connection on its worker"),
            }
            drop(open);
        });
    }

    /// Runs `future` on worker `index`, as if a connection there had asked.
    #[cfg(test)]
    pub(crate) fn spawn_on<F>(&self, index: usize, future: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.workers[index].handle.spawn(future)
    }

    /// The worker with the fewest open connections; ties go round in turn.
    fn pick(&self) -> usize {
        let count = self.workers.len();
        if count == 1 {
            return 0;
        }
        let start = self.next.fetch_add(1, Ordering::Relaxed) % count;
        (0..count)
            .map(|offset| (start + offset) % count)
            .min_by_key(|&index| self.workers[index].open.load(Ordering::Relaxed))
            .unwrap_or(0)
    }
}

impl Worker {
    fn new(handle: Handle, stop: Option<oneshot::Sender<()>>) -> Self {
        Self {
            handle,
            open: Arc::new(AtomicUsize::new(0)),
            _stop: stop,
        }
    }
}

/// Starts worker `index`: a thread running a single-threaded runtime until `stop` is dropped.
fn spawn_worker(index: usize) -> std::io::Result<(Handle, oneshot::Sender<()>)> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let handle = runtime.handle().clone();
    let (stop, stopped) = oneshot::channel::<()>();
    std::thread::Builder::new()
        .name(format!("countersign-worker-{index}"))
        .spawn(move || {
            INDEX.with(|cell| cell.set(index));
            // Ends when the sender is dropped; the runtime's remaining tasks are dropped with it.
            let _ = runtime.block_on(stopped);
        })?;
    Ok((handle, stop))
}

/// One open connection on a worker, counted until it ends (or its task is dropped).
struct OpenGuard(Arc<AtomicUsize>);

impl OpenGuard {
    fn new(open: Arc<AtomicUsize>) -> Self {
        open.fetch_add(1, Ordering::Relaxed);
        Self(open)
    }
}

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn connections_go_to_the_worker_with_the_fewest_open_and_run_there() {
        let workers = Workers::start(NonZeroUsize::new(3).unwrap()).unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (ran_on, mut seen) = tokio::sync::mpsc::unbounded_channel();
        let mut clients = Vec::new();
        let mut releases = Vec::new();
        for _ in 0..6 {
            clients.push(TcpStream::connect(addr).await.unwrap());
            let (stream, _) = listener.accept().await.unwrap();
            let (release, released) = oneshot::channel::<()>();
            releases.push(release);
            let ran_on = ran_on.clone();
            workers.spawn_connection(stream, move |stream| async move {
                // The socket works on the worker's own event loop.
                let mut buf = [0u8; 1];
                let _ = stream.peer_addr().unwrap();
                let _ = stream.try_read(&mut buf);
                ran_on.send(current_index()).unwrap();
                let _ = released.await;
            });
        }
        let mut ran = Vec::new();
        for _ in 0..6 {
            ran.push(seen.recv().await.unwrap());
        }
        let counts: Vec<usize> = workers
            .workers
            .iter()
            .map(|worker| worker.open.load(Ordering::Relaxed))
            .collect();
        assert_eq!(counts, vec![2, 2, 2], "six connections over three workers");
        let per_thread: Vec<usize> = (0..3)
            .map(|i| ran.iter().filter(|&&r| r == i).count())
            .collect();
        assert_eq!(
            per_thread,
            vec![2, 2, 2],
            "each ran on its worker's thread: {ran:?}"
        );
        drop(releases);
        for _ in 0..100 {
            if workers
                .workers
                .iter()
                .all(|w| w.open.load(Ordering::Relaxed) == 0)
            {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        panic!("a connection that ended is still counted as open");
    }

    #[tokio::test]
    async fn a_worker_thread_knows_its_index() {
        let workers = Workers::start(NonZeroUsize::new(2).unwrap()).unwrap();
        let (tx, rx) = oneshot::channel();
        workers.workers[1].handle.spawn(async move {
            tx.send(current_index()).unwrap();
        });
        assert_eq!(rx.await.unwrap(), 1);
        assert_eq!(current_index(), 0);
        assert_eq!(workers.count(), 2);
    }
}
