//! A connection's task polled again at once when it wakes itself, not sent round the
//! runtime.
//!
//! Every request read over HTTP/1 wakes its own connection's task: the request body's
//! channel tells the connection, which is the task reading the body, that it wants more
//! (hyper's `want` signal), from inside the task's own poll. Tokio treats a task woken
//! during its own poll as one that yielded: it queues the task behind the others and, when
//! a worker is parked, wakes that worker to come and steal — on an idle node one thread
//! wakes another for every request, to find nothing to do or to move the connection to
//! another core. That was the second of the ~2.3 context switches a point select cost
//! against ~1 for `GET /health` (PERFORMANCE.md, "One context switch less per request").
//!
//! [`RepollOnSelfWake`] gives the task a waker of its own: a wake that arrives while the
//! task is being polled only marks it, and the task is polled again before the poll
//! returns; a wake at any other time (the socket is readable, a statement finished)
//! reaches the runtime's waker as before. The repolls are bounded
//! ([`MAX_REPOLLS`]): past them the wake goes to the runtime, so a future that wakes
//! itself in a loop (tokio's cooperative budget spent) still yields to the others.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use futures_util::task::AtomicWaker;

/// Polls in a row one poll of the runtime may make when the future keeps waking itself;
/// the wake after the last goes to the runtime. A request needs one.
pub const MAX_REPOLLS: u32 = 2;

/// Not being polled: a wake goes to the runtime.
const IDLE: u8 = 0;
/// Being polled, not woken yet.
const POLLING: u8 = 1;
/// Woken while being polled: poll again.
const WOKEN: u8 = 2;

/// Wraps `inner` so that wakes from inside its own poll repoll it in place.
pub fn repoll_on_self_wake<F: Future>(inner: F) -> RepollOnSelfWake<F> {
    let relay = Arc::new(Relay {
        state: AtomicU8::new(IDLE),
        runtime: AtomicWaker::new(),
    });
    RepollOnSelfWake {
        inner: Box::pin(inner),
        waker: Waker::from(relay.clone()),
        relay,
    }
}

/// A future whose wakes from inside its own poll repoll it in place
/// ([`repoll_on_self_wake`]).
pub struct RepollOnSelfWake<F> {
    inner: Pin<Box<F>>,
    relay: Arc<Relay>,
    /// The waker `inner` is polled with: one for the future's life, so that what it
    /// registers with (the socket, channels) sees the same waker at every poll.
    waker: Waker,
}

/// What the future's own waker does: mark a wake while polled, else pass it on.
struct Relay {
    state: AtomicU8,
    /// The waker of the runtime's last poll.
    runtime: AtomicWaker,
}

impl Wake for Relay {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        match self
            .state
            .compare_exchange(POLLING, WOKEN, Ordering::AcqRel, Ordering::Acquire)
        {
            // Seen when the poll ends.
            Ok(_) => {}
            Err(WOKEN) => {}
            // Idle, or the poll ended since: the runtime polls the task again.
            Err(_) => self.runtime.wake(),
        }
    }
}

impl<F: Future> Future for RepollOnSelfWake<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = &mut *self;
        this.relay.runtime.register(cx.waker());
        let mut own = Context::from_waker(&this.waker);
        let mut repolls = 0;
        loop {
            this.relay.state.store(POLLING, Ordering::Release);
            if let Poll::Ready(output) = this.inner.as_mut().poll(&mut own) {
                this.relay.state.store(IDLE, Ordering::Release);
                return Poll::Ready(output);
            }
            let woken = this
                .relay
                .state
                .compare_exchange(POLLING, IDLE, Ordering::AcqRel, Ordering::Acquire)
                .is_err();
            if !woken {
                return Poll::Pending;
            }
            if repolls == MAX_REPOLLS {
                this.relay.state.store(IDLE, Ordering::Release);
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            repolls += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// A runtime's waker that counts its wakes.
    #[derive(Default)]
    struct Counting(AtomicUsize);

    impl Wake for Counting {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    impl Counting {
        fn wakes(&self) -> usize {
            self.0.load(Ordering::SeqCst)
        }
    }

    /// Wakes itself from inside its first `self_wakes` polls, then is ready; keeps its last
    /// waker for the test to wake from outside.
    struct SelfWaking {
        self_wakes: u32,
        polls: u32,
        last_waker: Arc<std::sync::Mutex<Option<Waker>>>,
    }

    impl Future for SelfWaking {
        type Output = u32;

        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<u32> {
            self.polls += 1;
            *self.last_waker.lock().unwrap() = Some(cx.waker().clone());
            if self.polls <= self.self_wakes {
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            if self.polls == self.self_wakes + 1 {
                // Waits for a wake from outside.
                return Poll::Pending;
            }
            Poll::Ready(self.polls)
        }
    }

    fn self_waking(self_wakes: u32) -> (SelfWaking, Arc<std::sync::Mutex<Option<Waker>>>) {
        let last_waker = Arc::new(std::sync::Mutex::new(None));
        let future = SelfWaking {
            self_wakes,
            polls: 0,
            last_waker: last_waker.clone(),
        };
        (future, last_waker)
    }

    #[test]
    fn a_wake_inside_the_poll_repolls_in_place_and_the_runtime_never_hears_of_it() {
        let (future, last_waker) = self_waking(1);
        let mut future = std::pin::pin!(repoll_on_self_wake(future));
        let runtime = Arc::new(Counting::default());
        let waker = Waker::from(runtime.clone());
        let mut cx = Context::from_waker(&waker);

        assert!(future.as_mut().poll(&mut cx).is_pending());
        assert_eq!(future.inner.polls, 2, "polled again at once");
        assert_eq!(runtime.wakes(), 0);

        // A wake from outside, after the poll: the runtime's to act on.
        last_waker.lock().unwrap().take().unwrap().wake();
        assert_eq!(runtime.wakes(), 1);
        assert_eq!(future.as_mut().poll(&mut cx), Poll::Ready(3));
    }

    #[test]
    fn a_future_that_keeps_waking_itself_yields_to_the_runtime_after_the_last_repoll() {
        let (future, _last_waker) = self_waking(10);
        let mut future = std::pin::pin!(repoll_on_self_wake(future));
        let runtime = Arc::new(Counting::default());
        let waker = Waker::from(runtime.clone());
        let mut cx = Context::from_waker(&waker);

        assert!(future.as_mut().poll(&mut cx).is_pending());
        assert_eq!(future.inner.polls, 1 + MAX_REPOLLS);
        assert_eq!(runtime.wakes(), 1, "the wake after the last repoll");

        // The runtime polls it again: three more polls, one more wake.
        assert!(future.as_mut().poll(&mut cx).is_pending());
        assert_eq!(future.inner.polls, 2 * (1 + MAX_REPOLLS));
        assert_eq!(runtime.wakes(), 2);
    }

    #[test]
    fn the_runtime_waker_of_the_latest_poll_is_the_one_woken() {
        let (future, last_waker) = self_waking(0);
        let mut future = std::pin::pin!(repoll_on_self_wake(future));
        let first = Arc::new(Counting::default());
        let second = Arc::new(Counting::default());
        let first_waker = Waker::from(first.clone());
        let second_waker = Waker::from(second.clone());

        assert!(future
            .as_mut()
            .poll(&mut Context::from_waker(&first_waker))
            .is_pending());
        // Moved to another worker: polled with another waker before the wake arrives.
        assert!(future
            .as_mut()
            .poll(&mut Context::from_waker(&second_waker))
            .is_ready());
        last_waker.lock().unwrap().take().unwrap().wake();
        assert_eq!((first.wakes(), second.wakes()), (0, 1));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn wakes_from_other_threads_reach_the_task() {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(repoll_on_self_wake(async move { rx.await.unwrap() }));
        tokio::task::spawn_blocking(move || {
            std::thread::sleep(std::time::Duration::from_millis(20));
            tx.send(7).unwrap();
        });
        assert_eq!(task.await.unwrap(), 7);
    }
}
