"""``privfl bench vfl``: where an encrypted epoch's time goes, against naive phe and fate_utils."""
