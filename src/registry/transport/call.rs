//! What a request is for: its operation and object (for errors), its repository and token
//! scope, the bytes it moves (for its deadline), and how its body is made again for a retry.

use bytes::Bytes;
use tokio::sync::OwnedSemaphorePermit;

use crate::registry::auth::Scope;
use crate::registry::repo::Repo;

/// What a request is for, in errors and token scopes; `permit` is a slot the caller already
/// holds (a resumed download keeps its own).
pub(crate) struct Call<'a> {
    pub op: &'static str,
    pub what: &'a str,
    pub repo: &'a Repo,
    pub scope: Scope,
    pub permit: Option<OwnedSemaphorePermit>,
    /// Bytes the request moves (either way), for its deadline.
    pub bytes: u64,
}

impl<'a> Call<'a> {
    fn new(op: &'static str, what: &'a str, repo: &'a Repo, scope: Scope) -> Self {
        Call {
            op,
            what,
            repo,
            scope,
            permit: None,
            bytes: 0,
        }
    }

    /// A read: the token needs pull on the repository.
    pub fn pull(op: &'static str, what: &'a str, repo: &'a Repo) -> Self {
        Self::new(op, what, repo, Scope::pull(&repo.repository))
    }

    /// A write: the token needs pull and push on the repository.
    pub fn push(op: &'static str, what: &'a str, repo: &'a Repo) -> Self {
        Self::new(op, what, repo, Scope::push(&repo.repository))
    }

    /// A cross-repository mount into `target`: one token with push on the target and pull on
    /// `source`.
    pub fn mount(op: &'static str, what: &'a str, target: &'a Repo, source: &Repo) -> Self {
        let scope = Scope::mount(&target.repository, &source.repository);
        Self::new(op, what, target, scope)
    }

    pub fn moving(mut self, bytes: u64) -> Self {
        self.bytes = bytes;
        self
    }

    pub fn holding(mut self, permit: Option<OwnedSemaphorePermit>) -> Self {
        self.permit = permit;
        self
    }
}

/// How a request's body is made for each attempt.
pub(crate) enum Body {
    Empty,
    Bytes(Bytes),
}

impl Body {
    pub fn len(&self) -> u64 {
        match self {
            Body::Empty => 0,
            Body::Bytes(b) => b.len() as u64,
        }
    }
}
