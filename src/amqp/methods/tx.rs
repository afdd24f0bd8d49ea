//! tx.select / commit / rollback: publishes and settlements are held until commit.

use super::basic::apply_settles;
use crate::amqp::channel::{Channel, Settle, TxState};
use crate::amqp::error::{AmqpError, AmqpResult};
use crate::amqp::session::Session;
use amq_protocol::protocol::{tx, AMQPClass};

impl Session {
    /// tx.select.
    pub(super) fn tx_select(&mut self, ch: &mut Channel) -> AmqpResult<()> {
        if ch.confirm {
            return Err(AmqpError::precondition_failed(
                "cannot switch from confirm to tx mode",
            ));
        }
        ch.tx.get_or_insert_with(TxState::default);
        self.send_method(
            ch.id,
            AMQPClass::Tx(tx::AMQPMethod::SelectOk(tx::SelectOk {})),
        );
        Ok(())
    }

    /// tx.commit: the held publishes are routed and stored, then the held settles applied.
    pub(super) async fn tx_commit(&mut self, ch: &mut Channel) -> AmqpResult<()> {
        let Some(state) = ch.tx.replace(TxState::default()) else {
            return Err(not_transactional());
        };
        let mut waiters = crate::vhost::publish::Waiters::default();
        for (publish, msg) in state.publishes {
            self.route_publish(ch, &publish, msg, Some(&mut waiters))
                .await?;
        }
        // Commit-ok means the transaction's persistent messages are on disk.
        if !waiters.stored().await {
            return Err(AmqpError::internal(
                "could not store the transaction's messages",
            ));
        }
        let mut acks = Vec::new();
        let mut requeues = Vec::new();
        let mut discards = Vec::new();
        for (e, how) in state.settles {
            match how {
                Settle::Ack => acks.push(e),
                Settle::Requeue => requeues.push(e),
                Settle::Discard => discards.push(e),
            }
        }
        apply_settles(ch, acks, Settle::Ack).await;
        apply_settles(ch, requeues, Settle::Requeue).await;
        apply_settles(ch, discards, Settle::Discard).await;
        self.send_method(
            ch.id,
            AMQPClass::Tx(tx::AMQPMethod::CommitOk(tx::CommitOk {})),
        );
        Ok(())
    }

    /// tx.rollback: held publishes are dropped, held settles undone.
    pub(super) fn tx_rollback(&mut self, ch: &mut Channel) -> AmqpResult<()> {
        let Some(state) = ch.tx.replace(TxState::default()) else {
            return Err(not_transactional());
        };
        ch.restore_unacked(state.settles.into_iter().map(|(e, _)| e).collect());
        self.send_method(
            ch.id,
            AMQPClass::Tx(tx::AMQPMethod::RollbackOk(tx::RollbackOk {})),
        );
        Ok(())
    }
}

fn not_transactional() -> AmqpError {
    AmqpError::precondition_failed("channel is not transactional")
}
