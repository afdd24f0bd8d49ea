//! Publisher confirms and transactions.

mod common;

use common::*;
use futures_lite::StreamExt;
use lapin::options::*;
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel};

async fn declare(ch: &Channel, q: &str) {
    within(ch.queue_declare(q.into(), Default::default(), FieldTable::default()))
        .await
        .expect("declare");
}

#[tokio::test]
async fn every_publish_is_confirmed_in_order() {
    let b = start().await;
    let (_c, ch) = b.channel().await;
    declare(&ch, "q").await;
    within(ch.confirm_select(Default::default()))
        .await
        .expect("confirm.select");
    let mut pending = Vec::new();
    for i in 0..500u32 {
        let routing = if i % 7 == 0 { "nowhere" } else { "q" };
        pending.push(
            within(ch.basic_publish(
                "".into(),
                routing.into(),
                Default::default(),
                &i.to_be_bytes(),
                BasicProperties::default(),
            ))
            .await
            .expect("publish"),
        );
    }
    for p in pending {
        assert!(within(p).await.expect("confirm").is_ack());
    }
    assert_eq!(ready(&ch, "q").await, 500 - 72);
}

#[tokio::test]
async fn confirm_and_tx_do_not_mix() {
    let b = start().await;
    let (c, ch) = b.channel().await;
    within(ch.confirm_select(Default::default()))
        .await
        .expect("confirm");
    assert_code(within(ch.tx_select()).await, 406);
    let ch = within(c.create_channel()).await.expect("channel");
    within(ch.tx_select()).await.expect("tx");
    assert_code(within(ch.confirm_select(Default::default())).await, 406);
    let ch = within(c.create_channel()).await.expect("channel");
    assert_code(within(ch.tx_commit()).await, 406);
    let ch = within(c.create_channel()).await.expect("channel");
    assert_code(within(ch.tx_rollback()).await, 406);
}

#[tokio::test]
async fn tx_publishes_wait_for_commit_and_vanish_on_rollback() {
    let b = start().await;
    let (_c, ch) = b.channel().await;
    let (_c2, observer) = b.channel().await;
    declare(&ch, "q").await;
    within(ch.tx_select()).await.expect("tx");
    for m in [b"1", b"2"] {
        within(ch.basic_publish(
            "".into(),
            "q".into(),
            Default::default(),
            m,
            BasicProperties::default(),
        ))
        .await
        .expect("publish");
    }
    assert_eq!(ready(&observer, "q").await, 0);
    within(ch.tx_commit()).await.expect("commit");
    assert_eq!(ready(&observer, "q").await, 2);
    within(ch.basic_publish(
        "".into(),
        "q".into(),
        Default::default(),
        b"3",
        BasicProperties::default(),
    ))
    .await
    .expect("publish");
    within(ch.tx_rollback()).await.expect("rollback");
    within(ch.tx_commit()).await.expect("empty commit");
    assert_eq!(ready(&observer, "q").await, 2);
}

#[tokio::test]
async fn tx_acks_wait_for_commit_and_come_back_on_rollback() {
    let b = start().await;
    let (_c, ch) = b.channel().await;
    declare(&ch, "q").await;
    for m in [b"1", b"2"] {
        within(ch.basic_publish(
            "".into(),
            "q".into(),
            Default::default(),
            m,
            BasicProperties::default(),
        ))
        .await
        .expect("publish");
    }
    within(ch.tx_select()).await.expect("tx");
    let mut cons = within(ch.basic_consume(
        "q".into(),
        "c".into(),
        Default::default(),
        FieldTable::default(),
    ))
    .await
    .expect("consume");
    let d1 = within(cons.next()).await.expect("d1").expect("ok");
    let d2 = within(cons.next()).await.expect("d2").expect("ok");
    within(d1.ack(Default::default())).await.expect("ack");
    within(ch.tx_rollback()).await.expect("rollback");
    // After rollback the ack is undone, so the tag is unacked again and can be acked.
    within(d1.ack(Default::default())).await.expect("ack again");
    within(d2.nack(BasicNackOptions {
        requeue: true,
        multiple: false,
    }))
    .await
    .expect("nack");
    within(ch.tx_commit()).await.expect("commit");
    let d = within(cons.next()).await.expect("redelivery").expect("ok");
    assert_eq!(d.data, b"2");
    assert!(d.redelivered);
}
