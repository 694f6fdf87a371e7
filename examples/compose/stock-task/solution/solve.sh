#!/bin/bash
python -c "
import json, os, urllib.request
stock = json.load(urllib.request.urlopen(os.environ['INVENTORY'] + '/stock.json'))
open('/app/answer.txt', 'w').write(str(stock['apples']))
"
